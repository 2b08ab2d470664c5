// The public Stream, Event and Recording: thin handles over the device layer.
#include "runtime/stream_impl.h"

#include "device/host_stream.h"
#include "runtime/devices.h"

namespace kiln {
namespace {

Status LaunchUserKernel(void* obj, const void* args, const device::ExecContext&) {
  auto fn = reinterpret_cast<KernelFn>(obj);
  fn(args);
  return Status::Ok();
}

}  // namespace

Event::Event() : state_(std::make_shared<State>()) {}
Event::~Event() = default;

Status Event::Synchronize() const {
  std::unique_lock<std::mutex> l(state_->mu);
  const std::uint64_t want = state_->recorded;
  state_->cv.wait(l, [&] { return state_->completed >= want; });
  return Status::Ok();
}

bool Event::Query() const {
  std::lock_guard<std::mutex> l(state_->mu);
  return state_->completed >= state_->recorded;
}

Recording::Recording(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Recording::~Recording() = default;
std::size_t Recording::size() const { return impl_->rec ? impl_->rec->size() : 0; }

Stream::Stream() : impl_(std::make_unique<Impl>()) {}

Result<std::unique_ptr<Stream>> Stream::Create() { return Create(""); }

Result<std::unique_ptr<Stream>> Stream::Create(const std::string& device) {
  KILN_ASSIGN_OR_RETURN(device::Device* d, runtime::OpenDevice(device));
  std::unique_ptr<Stream> s(new Stream());
  s->impl_->device = d;
  KILN_ASSIGN_OR_RETURN(s->impl_->stream, d->CreateStream());
  return s;
}

Stream::~Stream() = default;  // the device stream waits for queued work

Status Stream::Synchronize() { return impl_->stream->Synchronize(); }
Status Stream::RecordEvent(Event& e) { return impl_->stream->RecordEvent(e); }
Status Stream::WaitEvent(const Event& e) { return impl_->stream->WaitEvent(e); }
Status Stream::LaunchHostFunc(std::function<Status()> fn) { return impl_->stream->HostFunc(std::move(fn)); }

Status Stream::LaunchKernel(KernelFn fn, const void* args) {
  if (!fn) return Error(StatusCode::kInvalidArgument, "LaunchKernel: null kernel function");
  const device::ExecContext ctx{impl_->device, impl_->stream.get(), 1};
  return impl_->stream->Launch(LaunchUserKernel, reinterpret_cast<void*>(fn), args, ctx);
}

Status Stream::BeginCapture() { return impl_->stream->BeginCapture(); }

Result<std::unique_ptr<Recording>> Stream::EndCapture() {
  KILN_ASSIGN_OR_RETURN(auto rec, impl_->stream->EndCapture());
  auto impl = std::make_unique<Recording::Impl>();
  impl->rec = std::move(rec);
  impl->device = impl_->device;
  return std::make_unique<Recording>(std::move(impl));
}

Status Stream::Replay(const Recording& recording) {
  if (!recording.impl() || !recording.impl()->rec) return Error(StatusCode::kInvalidArgument, "Replay: empty recording");
  if (recording.impl()->device != impl_->device) {
    return Error(StatusCode::kInvalidArgument, "Replay: the recording was made on device '",
                 recording.impl()->device->spec(), "', this stream is on '", impl_->device->spec(), "'");
  }
  const device::ExecContext ctx{impl_->device, impl_->stream.get(), 1};
  return impl_->stream->Replay(*recording.impl()->rec, ctx);
}

const std::string& Stream::device() const { return impl_->device->spec(); }

std::uint64_t Stream::tasks_completed() const { return impl_->stream->tasks_completed(); }

}  // namespace kiln
