// The device layer: a conformance suite every device registers into (in the
// manner of IREE's HAL CTS), the simulated discrete device's discipline, and
// models on every device (bit-identical to the CPU, address refresh through
// device buffers, streams), plus per-model thread counts.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "backends/cpu/kernel.h"
#include "backends/cpu/kernels/util.h"
#include "api/compiler.h"
#include "format/kiln_file.h"
#include "kiln/runtime.h"
#include "kiln/stream.h"
#include "runtime/devices.h"
#include "test_util.h"

namespace kiln {
namespace {

using device::CopyKind;
using device::ExecContext;

// Launch bodies used below. A launch is a device operation: on sim the
// device's memory is accessible inside it.
struct AppendArgs {
  int* log;      // device memory: log[0] = count, then values
  int value;
};
Status Append(void*, const void* a, const ExecContext&) {
  const auto* args = static_cast<const AppendArgs*>(a);
  args->log[1 + args->log[0]++] = args->value;
  return Status::Ok();
}
Status SlowSet(void* obj, const void*, const ExecContext&) {
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  *static_cast<int*>(obj) = 42;
  return Status::Ok();
}
// args: a device block holding one pointer; writes 7 where it points.
Status WriteThroughBlock(void*, const void* a, const ExecContext&) {
  int* target = *static_cast<int* const*>(a);
  *target = 7;
  return Status::Ok();
}
Status Fail(void*, const void*, const ExecContext&) {
  return Error(StatusCode::kInternal, "deliberate launch failure");
}
Status Count(void* obj, const void*, const ExecContext&) {
  ++*static_cast<std::atomic<int>*>(obj);
  return Status::Ok();
}

class DeviceConformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto d = runtime::OpenDevice(GetParam());
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    dev_ = d.value();
    auto s = dev_->CreateStream();
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    stream_ = std::move(s).value();
  }
  void* Alloc(std::size_t n) {
    auto p = dev_->Allocate(n);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    allocs_.push_back(p.value());
    return p.value();
  }
  void TearDown() override {
    if (stream_) {
      EXPECT_TRUE(stream_->Synchronize().ok());
    }
    stream_.reset();
    for (void* p : allocs_) dev_->Free(p);
  }
  std::vector<int> ReadInts(const void* dev, std::size_t n) {
    std::vector<int> out(n);
    EXPECT_TRUE(stream_->Copy(out.data(), dev, n * sizeof(int), CopyKind::kDeviceToHost).ok());
    EXPECT_TRUE(stream_->Synchronize().ok());
    return out;
  }
  device::Device* dev_ = nullptr;
  std::unique_ptr<device::Stream> stream_;
  std::vector<void*> allocs_;
};

TEST_P(DeviceConformance, AllocationAndAlignment) {
  const std::size_t align = dev_->caps().alignment;
  EXPECT_GE(align, 64u);
  for (std::size_t n : {1u, 3u, 64u, 1000u, 4097u, 1u << 20}) {
    auto* p = static_cast<std::uint8_t*>(Alloc(n));
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % align, 0u) << n;
  }
  auto pinned = dev_->Allocate(100, device::MemoryKind::kPinnedHost);
  ASSERT_TRUE(pinned.ok());
  std::memset(pinned.value(), 1, 100);  // pinned memory is host memory on every device
  dev_->Free(pinned.value());
  auto huge = dev_->Allocate(std::size_t{1} << 63);
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("9223372036854775808"), std::string::npos) << huge.status().message();
}

TEST_P(DeviceConformance, CopiesInEachDirectionWithOddSizesAndOffsets) {
  std::vector<std::uint8_t> src(1031);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::uint8_t>(i * 7 + 3);
  auto* a = static_cast<std::uint8_t*>(Alloc(2048));
  auto* b = static_cast<std::uint8_t*>(Alloc(2048));
  ASSERT_TRUE(stream_->Copy(a + 5, src.data(), 1031, CopyKind::kHostToDevice).ok());
  src.assign(src.size(), 0);  // the source may be reused as soon as Copy returns
  ASSERT_TRUE(stream_->Copy(b + 17, a + 5 + 2, 1000, CopyKind::kDeviceToDevice).ok());
  std::vector<std::uint8_t> back(1000, 0xEE), whole(1031, 0xEE);
  ASSERT_TRUE(stream_->Copy(back.data(), b + 17, 1000, CopyKind::kDeviceToHost).ok());
  ASSERT_TRUE(stream_->Copy(whole.data(), a + 5, 1031, CopyKind::kDeviceToHost).ok());
  ASSERT_TRUE(stream_->Synchronize().ok());
  for (std::size_t i = 0; i < 1031; ++i) ASSERT_EQ(whole[i], static_cast<std::uint8_t>(i * 7 + 3)) << i;
  for (std::size_t i = 0; i < 1000; ++i) ASSERT_EQ(back[i], static_cast<std::uint8_t>((i + 2) * 7 + 3)) << i;
  EXPECT_TRUE(stream_->Copy(a, src.data(), 0, CopyKind::kHostToDevice).ok());  // empty copy: nothing
  EXPECT_FALSE(stream_->Copy(nullptr, src.data(), 4, CopyKind::kHostToDevice).ok());
}

TEST_P(DeviceConformance, StreamOrderIsLaunchOrder) {
  int* log = static_cast<int*>(Alloc(101 * sizeof(int)));
  const int zero = 0;
  ASSERT_TRUE(stream_->Copy(log, &zero, sizeof(int), CopyKind::kHostToDevice).ok());
  std::vector<AppendArgs> args(100);
  const ExecContext ctx{dev_, stream_.get(), 1};
  for (int i = 0; i < 100; ++i) {
    args[i] = {log, i * 3};
    ASSERT_TRUE(stream_->Launch(Append, nullptr, &args[i], ctx).ok());
  }
  std::vector<int> got = ReadInts(log, 101);
  EXPECT_EQ(got[0], 100);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(got[1 + i], i * 3) << i;
}

TEST_P(DeviceConformance, EventsOrderWorkAcrossStreams) {
  auto other = dev_->CreateStream();
  ASSERT_TRUE(other.ok());
  int* a = static_cast<int*>(Alloc(sizeof(int)));
  int* b = static_cast<int*>(Alloc(sizeof(int)));
  const int zero = 0;
  ASSERT_TRUE(stream_->Copy(a, &zero, sizeof(int), CopyKind::kHostToDevice).ok());
  ASSERT_TRUE(stream_->Synchronize().ok());
  Event e;
  const ExecContext ctx{dev_, stream_.get(), 1};
  ASSERT_TRUE(stream_->Launch(SlowSet, a, nullptr, ctx).ok());
  ASSERT_TRUE(stream_->RecordEvent(e).ok());
  ASSERT_TRUE((*other)->WaitEvent(e).ok());
  ASSERT_TRUE((*other)->Copy(b, a, sizeof(int), CopyKind::kDeviceToDevice).ok());
  ASSERT_TRUE((*other)->Synchronize().ok());
  EXPECT_TRUE(e.Query());
  EXPECT_EQ(ReadInts(b, 1)[0], 42);  // the copy waited for the slow write
}

TEST_P(DeviceConformance, CaptureRecordsAndReplayRunsTheList) {
  std::atomic<int> n{0};
  const ExecContext ctx{dev_, stream_.get(), 1};
  ASSERT_TRUE(stream_->BeginCapture().ok());
  EXPECT_TRUE(stream_->capturing());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(stream_->Launch(Count, &n, nullptr, ctx).ok());
  int x = 0;
  void* d = Alloc(4);
  Status refused = stream_->Copy(d, &x, 4, CopyKind::kHostToDevice);
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("capturing"), std::string::npos) << refused.message();
  EXPECT_FALSE(stream_->BeginCapture().ok());
  auto rec = stream_->EndCapture();
  ASSERT_TRUE(rec.ok());
  EXPECT_FALSE(stream_->capturing());
  EXPECT_EQ((*rec)->size(), 3u);
  ASSERT_TRUE(stream_->Synchronize().ok());
  EXPECT_EQ(n.load(), 0);  // recorded, not run
  ASSERT_TRUE(stream_->Replay(**rec, ctx).ok());
  ASSERT_TRUE(stream_->Replay(**rec, ctx).ok());
  ASSERT_TRUE(stream_->Synchronize().ok());
  EXPECT_EQ(n.load(), 6);
  EXPECT_FALSE(stream_->EndCapture().ok());
}

TEST_P(DeviceConformance, ReplayFollowsARefreshedArgumentBlock) {
  int* t1 = static_cast<int*>(Alloc(sizeof(int)));
  int* t2 = static_cast<int*>(Alloc(sizeof(int)));
  void** block = static_cast<void**>(Alloc(sizeof(void*)));
  const int zero = 0;
  ASSERT_TRUE(stream_->Copy(t1, &zero, sizeof(int), CopyKind::kHostToDevice).ok());
  ASSERT_TRUE(stream_->Copy(t2, &zero, sizeof(int), CopyKind::kHostToDevice).ok());
  void* host_block = t1;
  ASSERT_TRUE(stream_->Copy(block, &host_block, sizeof(void*), CopyKind::kHostToDevice).ok());
  const ExecContext ctx{dev_, stream_.get(), 1};
  ASSERT_TRUE(stream_->BeginCapture().ok());
  ASSERT_TRUE(stream_->Launch(WriteThroughBlock, nullptr, block, ctx).ok());
  auto rec = stream_->EndCapture();
  ASSERT_TRUE(rec.ok());
  ASSERT_TRUE(stream_->Replay(**rec, ctx).ok());
  host_block = t2;  // the buffer moved: rewrite the block, replay the same list
  ASSERT_TRUE(stream_->Copy(block, &host_block, sizeof(void*), CopyKind::kHostToDevice).ok());
  const int minus = -1;
  ASSERT_TRUE(stream_->Copy(t1, &minus, sizeof(int), CopyKind::kHostToDevice).ok());
  ASSERT_TRUE(stream_->Replay(**rec, ctx).ok());
  EXPECT_EQ(ReadInts(t1, 1)[0], -1);  // not written by the second replay
  EXPECT_EQ(ReadInts(t2, 1)[0], 7);
}

TEST_P(DeviceConformance, ErrorsSurfaceAtTheNextSynchronize) {
  std::atomic<int> n{0};
  const ExecContext ctx{dev_, stream_.get(), 1};
  ASSERT_TRUE(stream_->Launch(Fail, nullptr, nullptr, ctx).ok());  // queued: no error yet
  ASSERT_TRUE(stream_->Launch(Count, &n, nullptr, ctx).ok());
  Status st = stream_->Synchronize();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("deliberate launch failure"), std::string::npos) << st.message();
  EXPECT_EQ(n.load(), 0);  // work after a failure is skipped
  EXPECT_TRUE(stream_->Synchronize().ok());  // reported once
  ASSERT_TRUE(stream_->Launch(Count, &n, nullptr, ctx).ok());
  ASSERT_TRUE(stream_->Synchronize().ok());
  EXPECT_EQ(n.load(), 1);
}

INSTANTIATE_TEST_SUITE_P(Devices, DeviceConformance,
                         ::testing::Values("cpu", "sim", "sim:seed=11,delay_us=300"),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           std::string n = i.param;
                           for (char& c : n) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return n;
                         });

TEST(DeviceLayer, DevicesAreNamedAndOptionsChecked) {
  auto bad = runtime::OpenDevice("tpu");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("unknown device 'tpu'"), std::string::npos);
  EXPECT_NE(bad.status().message().find("cpu, sim"), std::string::npos);
  auto opt = runtime::OpenDevice("sim:speed=3");
  ASSERT_FALSE(opt.ok());
  EXPECT_NE(opt.status().message().find("unknown option 'speed'"), std::string::npos);
  EXPECT_FALSE(runtime::OpenDevice("sim:seed=x").ok());
  EXPECT_FALSE(runtime::OpenDevice("cpu:lack=Relu").ok());
  auto a = runtime::OpenDevice("sim:seed=5");
  auto b = runtime::OpenDevice("sim:seed=5");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a.value(), b.value());  // one device per spec
}

TEST(DeviceLayer, CapabilitiesAndLackedOps) {
  device::Device& cpu = runtime::CpuDevice();
  EXPECT_TRUE(cpu.caps().host_addressable);
  EXPECT_TRUE(cpu.caps().maps_host_memory);
  EXPECT_TRUE(cpu.SupportsOp("Relu", "", {DType::kFloat32}));
  EXPECT_FALSE(cpu.SupportsOp("NoSuchOp", "", {}));
  auto sim = runtime::OpenDevice("sim:lack=Relu+Conv");
  ASSERT_TRUE(sim.ok());
  const device::Capabilities& c = sim.value()->caps();
  EXPECT_FALSE(c.host_addressable);
  EXPECT_FALSE(c.maps_host_memory);
  EXPECT_EQ(c.kernel_library, "cpu");
  EXPECT_FALSE(sim.value()->SupportsOp("Relu", "", {DType::kFloat32}));
  EXPECT_FALSE(sim.value()->SupportsOp("Conv", "", {DType::kFloat32}));
  EXPECT_TRUE(sim.value()->SupportsOp("Add", "", {DType::kFloat32}));
}

// sim completes work late: reading a device->host copy before synchronising
// sees the old bytes. (A fixed seed makes the delays deterministic; eight
// queued operations of up to 20 ms each take far longer than the check.)
TEST(SimDevice, AMissingSynchronizeIsCaught) {
  auto d = runtime::OpenDevice("sim:seed=3,delay_us=20000");
  ASSERT_TRUE(d.ok());
  auto s = d.value()->CreateStream();
  ASSERT_TRUE(s.ok());
  auto p = d.value()->Allocate(sizeof(int));
  ASSERT_TRUE(p.ok());
  std::atomic<int> n{0};
  const ExecContext ctx{d.value(), s->get(), 1};
  for (int i = 0; i < 7; ++i) ASSERT_TRUE((*s)->Launch(Count, &n, nullptr, ctx).ok());
  const int v = 99;
  ASSERT_TRUE((*s)->Copy(p.value(), &v, sizeof(int), CopyKind::kHostToDevice).ok());
  int host = 0;
  ASSERT_TRUE((*s)->Copy(&host, p.value(), sizeof(int), CopyKind::kDeviceToHost).ok());
  EXPECT_EQ(host, 0);  // not there yet
  EXPECT_LT(n.load(), 7);
  ASSERT_TRUE((*s)->Synchronize().ok());
  EXPECT_EQ(host, 99);
  EXPECT_EQ(n.load(), 7);
  d.value()->Free(p.value());
}

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KILN_TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define KILN_TEST_ASAN 1
#endif

// The sanitizer build proves the discipline: host code touching sim memory
// outside a device operation aborts with a report.
TEST(SimDevice, AHostReadOutsideADeviceOperationAborts) {
#ifndef KILN_TEST_ASAN
  GTEST_SKIP() << "sim memory is poisoned only in the AddressSanitizer build (make test-asan runs this)";
#else
  auto d = runtime::OpenDevice("sim:delay_us=0");
  ASSERT_TRUE(d.ok());
  auto p = d.value()->Allocate(64);
  ASSERT_TRUE(p.ok());
  volatile int* q = static_cast<int*>(p.value());
  EXPECT_DEATH({ (void)q[3]; }, "use-after-poison");
  // Inside a device operation the same read is fine.
  int got = -1;
  ASSERT_TRUE(d.value()->RunPrepare([&]() { got = q[3] * 0; return Status::Ok(); }).ok());
  EXPECT_EQ(got, 0);
  d.value()->Free(p.value());
#endif
}

// A host launch (a CPU-placed node) in a replayed recording is not a device
// operation: reading the device's memory from it aborts the sanitizer
// build, while the same read from a device launch in the same list is fine.
Status ReadFirstInt(void*, const void* args, const ExecContext&) {
  volatile const int* q = *static_cast<int* const*>(args);
  return q[0] == 12345 ? Error(StatusCode::kInternal, "never") : Status::Ok();
}
TEST(SimDevice, AHostLaunchReadingDeviceMemoryAborts) {
#ifndef KILN_TEST_ASAN
  GTEST_SKIP() << "sim memory is poisoned only in the AddressSanitizer build (make test-asan runs this)";
#else
  auto d = runtime::OpenDevice("sim:delay_us=0");
  ASSERT_TRUE(d.ok());
  auto p = d.value()->Allocate(64);
  ASSERT_TRUE(p.ok());
  int* dev_ptr = static_cast<int*>(p.value());
  auto s = d.value()->CreateStream();
  ASSERT_TRUE(s.ok());
  ExecContext ctx{d.value(), s.value().get(), 1};
  ASSERT_TRUE((*s)->BeginCapture().ok());
  ASSERT_TRUE((*s)->Launch(ReadFirstInt, nullptr, &dev_ptr, ctx).ok());
  auto ok_rec = (*s)->EndCapture();
  ASSERT_TRUE(ok_rec.ok());
  ASSERT_TRUE((*s)->Replay(**ok_rec, ctx).ok());
  ASSERT_TRUE((*s)->Synchronize().ok());
  auto host_read = [&]() {
    auto s2 = d.value()->CreateStream();
    ExecContext c2{d.value(), s2.value().get(), 1};
    (void)(*s2)->BeginCapture();
    (void)(*s2)->Launch(ReadFirstInt, nullptr, &dev_ptr, c2);
    (void)(*s2)->LaunchHost(ReadFirstInt, nullptr, &dev_ptr, c2);
    auto rec = (*s2)->EndCapture();
    (void)(*s2)->Replay(**rec, c2);
    (void)(*s2)->Synchronize();
  };
  EXPECT_DEATH(host_read(), "use-after-poison");
  d.value()->Free(p.value());
#endif
}

// ---- models on every device ----

// y = relu(x * w + b), z = x + 1 (two outputs; constants embedded).
std::unique_ptr<ir::Graph> SmallGraph() {
  auto g = std::make_unique<ir::Graph>();
  g->set_name("small");
  ir::Value* x = g->AddValue("x", DType::kFloat32, {2, 3});
  g->inputs().push_back(x);
  ir::Value* w = g->AddConstant("w", test::F32({2, 3}, {1, 2, 3, 4, 5, 6}));
  ir::Value* b = g->AddConstant("b", test::F32({3}, {-10, 0, 10}));
  ir::Value* one = g->AddConstant("one", test::F32({1}, {1}));
  ir::Value* m = g->AddValue("m");
  ir::Value* a = g->AddValue("a");
  ir::Value* y = g->AddValue("y");
  ir::Value* z = g->AddValue("z");
  g->AddNode("Mul", "mul", {x, w}, {m});
  g->AddNode("Add", "add", {m, b}, {a});
  g->AddNode("Relu", "relu", {a}, {y});
  g->AddNode("Add", "inc", {x, one}, {z});
  g->outputs().push_back(y);
  g->outputs().push_back(z);
  test::SetLatestVersions(*g);
  return g;
}
Result<format::CompiledModel> SmallModel() { return CompileGraph(SmallGraph(), {}); }

class DeviceModel : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto m = SmallModel();
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    path_ = dir_.file("m.kiln");
    ASSERT_TRUE(format::WriteModelFile(m.value(), path_).ok());
  }
  std::unique_ptr<Model> Load(const std::string& device, int threads = 1) {
    LoadOptions o;
    o.device = device;
    o.threads = threads;
    auto m = Model::Load(path_, o);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m.ok() ? std::move(m).value() : nullptr;
  }
  test::TempDir dir_;
  std::string path_;
};

// Hand-computed: x = [1..6]: relu(x*w + b) = [0, 4, 19, 6, 25, 46]; x + 1.
TEST_P(DeviceModel, HostBuffersGiveTheHandComputedResult) {
  auto m = Load(GetParam());
  ASSERT_TRUE(m);
  std::vector<float> x = {1, 2, 3, 4, 5, 6}, y(6), z(6);
  ASSERT_TRUE(m->Execute({TensorRef::Of(x.data(), {2, 3})},
                         {TensorRef::Of(y.data(), {2, 3}), TensorRef::Of(z.data(), {2, 3})}).ok());
  EXPECT_EQ(y, (std::vector<float>{0, 4, 19, 6, 25, 46}));
  EXPECT_EQ(z, (std::vector<float>{2, 3, 4, 5, 6, 7}));
}

// Device buffers are bound in place: moving one rewrites only its slots.
TEST_P(DeviceModel, DeviceBuffersAreRefreshedNotCopied) {
  auto m = Load(GetParam());
  ASSERT_TRUE(m);
  const std::string dev = GetParam();
  auto x1 = DeviceBuffer::Allocate(dev, 24), x2 = DeviceBuffer::Allocate(dev, 24);
  auto y1 = DeviceBuffer::Allocate(dev, 24), y2 = DeviceBuffer::Allocate(dev, 24);
  auto z = DeviceBuffer::Allocate(dev, 24);
  ASSERT_TRUE(x1.ok() && x2.ok() && y1.ok() && y2.ok() && z.ok());
  std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {-1, -2, -3, 1, 2, 3};
  ASSERT_TRUE((*x1)->CopyFromHost(a.data(), 24).ok());
  ASSERT_TRUE((*x2)->CopyFromHost(b.data(), 24).ok());
  auto run = [&](DeviceBuffer& x, DeviceBuffer& y) {
    return m->Execute({x.Ref(DType::kFloat32, {2, 3})},
                      {y.Ref(DType::kFloat32, {2, 3}), (*z)->Ref(DType::kFloat32, {2, 3})});
  };
  ASSERT_TRUE(run(**x1, **y1).ok());
  EXPECT_EQ(m->last_stats().slots_refreshed, 4u);  // x: mul, inc; y: relu; z: inc
  ASSERT_TRUE(run(**x1, **y1).ok());
  EXPECT_EQ(m->last_stats().slots_refreshed, 0u);
  ASSERT_TRUE(run(**x2, **y2).ok());
  EXPECT_EQ(m->last_stats().slots_refreshed, 3u);  // x twice, y once
  std::vector<float> r1(6), r2(6), rz(6);
  ASSERT_TRUE((*y1)->CopyToHost(r1.data(), 24).ok());
  ASSERT_TRUE((*y2)->CopyToHost(r2.data(), 24).ok());
  ASSERT_TRUE((*z)->CopyToHost(rz.data(), 24).ok());
  EXPECT_EQ(r1, (std::vector<float>{0, 4, 19, 6, 25, 46}));
  // relu(b*w + bias): [-1-10, -4, -9+10, 4-10, 10, 18+10]
  EXPECT_EQ(r2, (std::vector<float>{0, 0, 1, 0, 10, 28}));
  EXPECT_EQ(rz, (std::vector<float>{0, -1, -2, 2, 3, 4}));
  EXPECT_FALSE((*z)->CopyToHost(rz.data(), 28).ok());  // past the end: named error
}

TEST_P(DeviceModel, AsyncRunsOnTheDevicesStream) {
  auto m = Load(GetParam());
  ASSERT_TRUE(m);
  auto s = Stream::Create(GetParam());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)->device(), GetParam());
  std::vector<float> x1 = {1, 2, 3, 4, 5, 6}, x2(6, 1.f), y1(6), y2(6), z1(6), z2(6);
  ASSERT_TRUE(m->ExecuteAsync(**s, {TensorRef::Of(x1.data(), {2, 3})},
                              {TensorRef::Of(y1.data(), {2, 3}), TensorRef::Of(z1.data(), {2, 3})}).ok());
  ASSERT_TRUE(m->ExecuteAsync(**s, {TensorRef::Of(x2.data(), {2, 3})},
                              {TensorRef::Of(y2.data(), {2, 3}), TensorRef::Of(z2.data(), {2, 3})}).ok());
  ASSERT_TRUE((*s)->Synchronize().ok());
  EXPECT_EQ(y1, (std::vector<float>{0, 4, 19, 6, 25, 46}));
  EXPECT_EQ(y2, (std::vector<float>{0, 2, 13, 0, 5, 16}));
  EXPECT_EQ(z2, (std::vector<float>{2, 2, 2, 2, 2, 2}));
  // A stream of another device is refused, naming both.
  auto other = Stream::Create(GetParam() == "cpu" ? "sim" : "cpu");
  ASSERT_TRUE(other.ok());
  Status st = m->ExecuteAsync(**other, {TensorRef::Of(x1.data(), {2, 3})},
                              {TensorRef::Of(y1.data(), {2, 3}), TensorRef::Of(z1.data(), {2, 3})});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("the stream is on device"), std::string::npos) << st.message();
}

INSTANTIATE_TEST_SUITE_P(Devices, DeviceModel, ::testing::Values("cpu", "sim"));

// A device without a kernel the file needs refuses to load it, naming the
// node, the op and the device.
TEST(DeviceModelCompare, LoadingOnADeviceThatLacksAKernelIsRefused) {
  test::TempDir dir;
  auto m = SmallModel();
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE(format::WriteModelFile(m.value(), dir.file("m.kiln")).ok());
  LoadOptions o;
  o.device = "sim:lack=Relu";
  auto model = Model::Load(dir.file("m.kiln"), o);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), StatusCode::kUnimplemented);
  const std::string msg = model.status().message();
  EXPECT_NE(msg.find("'relu'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("device 'sim:lack=Relu' has no kernel for Relu"), std::string::npos) << msg;
  EXPECT_NE(msg.find("compiled for 'cpu'"), std::string::npos) << msg;
  o.device = "sim:lack=Conv";  // lacks an op the model does not use
  EXPECT_TRUE(Model::Load(dir.file("m.kiln"), o).ok());
}

// The compile target: passes ask it, the .kiln records it, a file compiled
// for one device runs on another that has its kernels; an unknown target is
// an error naming it.
TEST(DeviceModelCompare, TheCompileTargetIsRecorded) {
  test::TempDir dir;
  auto build = []() {
    auto g = std::make_unique<ir::Graph>();
    g->set_name("t");
    ir::Value* x = g->AddValue("x", DType::kFloat32, {4});
    g->inputs().push_back(x);
    ir::Value* y = g->AddValue("y");
    g->AddNode("Relu", "relu", {x}, {y});
    g->outputs().push_back(y);
    test::SetLatestVersions(*g);
    return g;
  };
  CompileOptions co;
  co.target = "sim:seed=4";
  auto cm = CompileGraph(build(), co);
  ASSERT_TRUE(cm.ok()) << cm.status().ToString();
  EXPECT_EQ(cm.value().target, "sim:seed=4");
  ASSERT_TRUE(format::WriteModelFile(cm.value(), dir.file("m.kiln")).ok());
  auto back = format::ReadModelFile(dir.file("m.kiln"), {});
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back.value().model.target, "sim:seed=4");
  for (const char* dev : {"cpu", "sim"}) {  // both have the kernels a sim target needs
    LoadOptions o;
    o.device = dev;
    auto m = Model::Load(dir.file("m.kiln"), o);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    std::vector<float> x = {-1, 2, -3, 4}, y(4);
    ASSERT_TRUE((*m)->Execute({TensorRef::Of(x.data(), {4})}, {TensorRef::Of(y.data(), {4})}).ok());
    EXPECT_EQ(y, (std::vector<float>{0, 2, 0, 4}));
  }
  co.target = "tpu";
  auto bad = CompileGraph(build(), co);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("unknown device 'tpu'"), std::string::npos) << bad.status().message();
}

// Passes ask the target: Conv + Relu fuses (one node) and goes channels-last
// (Transposes around it) for cpu, neither for a target without them.
TEST(DeviceModelCompare, PassesAskTheTargetWhatItSupports) {
  auto build = []() {
    auto g = std::make_unique<ir::Graph>();
    g->set_name("cr");
    ir::Value* x = g->AddValue("x", DType::kFloat32, {1, 2, 5, 5});
    g->inputs().push_back(x);
    std::vector<float> wv(3 * 2 * 3 * 3);
    for (std::size_t i = 0; i < wv.size(); ++i) wv[i] = static_cast<float>(i % 5) - 2.f;
    ir::Value* w = g->AddConstant("w", test::F32({3, 2, 3, 3}, wv));
    ir::Value* c = g->AddValue("c");
    ir::Value* y = g->AddValue("y");
    g->AddNode("Conv", "conv", {x, w}, {c});
    g->AddNode("Relu", "relu", {c}, {y});
    g->outputs().push_back(y);
    test::SetLatestVersions(*g);
    return g;
  };
  auto count = [](const format::CompiledModel& m, const std::string& op) {
    int n = 0;
    for (auto& node : m.graph->nodes()) n += node->op_type() == op;
    return n;
  };
  CompileOptions co;
  auto cpu = CompileGraph(build(), co);
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  EXPECT_EQ(count(cpu.value(), "Relu"), 0);  // fused into the Conv
  EXPECT_GT(count(cpu.value(), "Transpose"), 0);  // NHWC around it
  co.target = "sim:no_fusion,no_nhwc";
  auto plain = CompileGraph(build(), co);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(count(plain.value(), "Relu"), 1);
  EXPECT_EQ(count(plain.value(), "Transpose"), 0);
  co.target = "sim:no_fusion";
  auto nhwc = CompileGraph(build(), co);
  ASSERT_TRUE(nhwc.ok());
  EXPECT_EQ(count(nhwc.value(), "Relu"), 1);
  EXPECT_GT(count(nhwc.value(), "Transpose"), 0);
  // Both compile to the same numbers.
  test::TempDir dir;
  std::vector<std::vector<float>> outs;
  for (auto* m : {&cpu.value(), &plain.value()}) {
    ASSERT_TRUE(format::WriteModelFile(*m, dir.file("m.kiln")).ok());
    LoadOptions o;
    o.device = "cpu";
    auto model = Model::Load(dir.file("m.kiln"), o);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    std::vector<float> x(50), y(27);
    for (int i = 0; i < 50; ++i) x[i] = std::sin(0.3f * static_cast<float>(i));
    ASSERT_TRUE((*model)->Execute({TensorRef::Of(x.data(), {1, 2, 5, 5})}, {TensorRef::Of(y.data(), {1, 3, 3, 3})}).ok());
    outs.push_back(y);
  }
  for (std::size_t i = 0; i < outs[0].size(); ++i) EXPECT_NEAR(outs[0][i], outs[1][i], 1e-5f) << i;
  co.target = "tpu";
  auto bad2 = CompileGraph(build(), co);
  ASSERT_FALSE(bad2.ok());
}


// Placement: compiled for a target without Add and Relu, mul runs on the
// target and add, relu and inc on the CPU, with copies: x and m to the host
// (for inc and add), y and z back into the outputs. Hand-computed results
// on every device that has the target's kernels (the lacking one included),
// through host buffers, moved device buffers (refreshed: the copy of x is a
// task like any other) and queued asynchronous runs.
TEST(Placement, CpuPlacedNodesRunOnEveryDevice) {
  CompileOptions co;
  co.target = "sim:lack=Add+Relu,no_fusion";
  auto cm = CompileGraph(SmallGraph(), co);
  ASSERT_TRUE(cm.ok()) << cm.status().ToString();
  int on_cpu = 0, to_host = 0, to_device = 0;
  for (auto& n : cm.value().graph->nodes()) {
    on_cpu += ir::IsHostPlaced(*n);
    to_host += ir::IsCopyToHost(*n);
    to_device += ir::IsCopyFromHost(*n);
    if (n->name() == "mul") EXPECT_FALSE(ir::IsHostPlaced(*n));
  }
  EXPECT_EQ(on_cpu, 3);
  EXPECT_EQ(to_host, 2);
  EXPECT_EQ(to_device, 2);
  EXPECT_GT(cm.value().plan.host_arena_size, 0u);
  test::TempDir dir;
  ASSERT_TRUE(format::WriteModelFile(cm.value(), dir.file("m.kiln")).ok());
  for (const char* dev : {"cpu", "sim", "sim:lack=Add+Relu", "sim:lack=Add+Relu,seed=9,delay_us=300"}) {
    SCOPED_TRACE(dev);
    LoadOptions o;
    o.device = dev;
    auto loaded = Model::Load(dir.file("m.kiln"), o);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    Model& m = **loaded;
    std::vector<float> x = {1, 2, 3, 4, 5, 6}, y(6), z(6);
    ASSERT_TRUE(m.Execute({TensorRef::Of(x.data(), {2, 3})},
                          {TensorRef::Of(y.data(), {2, 3}), TensorRef::Of(z.data(), {2, 3})}).ok());
    EXPECT_EQ(y, (std::vector<float>{0, 4, 19, 6, 25, 46}));
    EXPECT_EQ(z, (std::vector<float>{2, 3, 4, 5, 6, 7}));
    // Device buffers, moved between runs.
    auto x1 = DeviceBuffer::Allocate(dev, 24), x2 = DeviceBuffer::Allocate(dev, 24);
    auto y1 = DeviceBuffer::Allocate(dev, 24), y2 = DeviceBuffer::Allocate(dev, 24);
    auto zb = DeviceBuffer::Allocate(dev, 24);
    ASSERT_TRUE(x1.ok() && x2.ok() && y1.ok() && y2.ok() && zb.ok());
    std::vector<float> b = {-1, -2, -3, 1, 2, 3};
    ASSERT_TRUE((*x1)->CopyFromHost(x.data(), 24).ok());
    ASSERT_TRUE((*x2)->CopyFromHost(b.data(), 24).ok());
    auto run = [&](DeviceBuffer& xi, DeviceBuffer& yi) {
      return m.Execute({xi.Ref(DType::kFloat32, {2, 3})},
                       {yi.Ref(DType::kFloat32, {2, 3}), (*zb)->Ref(DType::kFloat32, {2, 3})});
    };
    ASSERT_TRUE(run(**x1, **y1).ok());
    EXPECT_EQ(m.last_stats().slots_refreshed, 4u);  // x: mul, its copy to the host; y, z: their copies
    ASSERT_TRUE(run(**x2, **y2).ok());
    EXPECT_EQ(m.last_stats().slots_refreshed, 3u);
    std::vector<float> r1(6), r2(6), rz(6);
    ASSERT_TRUE((*y1)->CopyToHost(r1.data(), 24).ok());
    ASSERT_TRUE((*y2)->CopyToHost(r2.data(), 24).ok());
    ASSERT_TRUE((*zb)->CopyToHost(rz.data(), 24).ok());
    EXPECT_EQ(r1, (std::vector<float>{0, 4, 19, 6, 25, 46}));
    EXPECT_EQ(r2, (std::vector<float>{0, 0, 1, 0, 10, 28}));
    EXPECT_EQ(rz, (std::vector<float>{0, -1, -2, 2, 3, 4}));
    // Two runs queued back to back on a stream: the second's refresh does
    // not disturb the first (host argument blocks are copied in stream order).
    auto s = Stream::Create(dev);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    std::vector<float> xa = {1, 2, 3, 4, 5, 6}, xb(6, 1.f), ya(6), yb(6), za(6), zb2(6);
    ASSERT_TRUE(m.ExecuteAsync(**s, {TensorRef::Of(xa.data(), {2, 3})},
                               {TensorRef::Of(ya.data(), {2, 3}), TensorRef::Of(za.data(), {2, 3})}).ok());
    ASSERT_TRUE(m.ExecuteAsync(**s, {TensorRef::Of(xb.data(), {2, 3})},
                               {TensorRef::Of(yb.data(), {2, 3}), TensorRef::Of(zb2.data(), {2, 3})}).ok());
    ASSERT_TRUE((*s)->Synchronize().ok());
    EXPECT_EQ(ya, (std::vector<float>{0, 4, 19, 6, 25, 46}));
    EXPECT_EQ(za, (std::vector<float>{2, 3, 4, 5, 6, 7}));
    EXPECT_EQ(yb, (std::vector<float>{0, 2, 13, 0, 5, 16}));
    EXPECT_EQ(zb2, (std::vector<float>{2, 2, 2, 2, 2, 2}));
  }
  // A device that lacks an op the CPU-placed file still runs on the target is refused.
  LoadOptions o;
  o.device = "sim:lack=Mul";
  auto bad = Model::Load(dir.file("m.kiln"), o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("device 'sim:lack=Mul' has no kernel for Mul"), std::string::npos)
      << bad.status().message();
}

// The same model on cpu and sim gives the same bits.
TEST(DeviceModelCompare, SimIsBitIdenticalToCpu) {
  test::TempDir dir;
  auto m = SmallModel();
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE(format::WriteModelFile(m.value(), dir.file("m.kiln")).ok());
  std::vector<float> x(6);
  for (int i = 0; i < 6; ++i) x[i] = 0.37f * static_cast<float>(i) - 1.1f;
  std::vector<std::vector<float>> ys;
  for (const char* dev : {"cpu", "sim"}) {
    LoadOptions o;
    o.device = dev;
    auto model = Model::Load(dir.file("m.kiln"), o);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    std::vector<float> y(6), z(6);
    ASSERT_TRUE((*model)->Execute({TensorRef::Of(x.data(), {2, 3})},
                                  {TensorRef::Of(y.data(), {2, 3}), TensorRef::Of(z.data(), {2, 3})}).ok());
    y.insert(y.end(), z.begin(), z.end());
    ys.push_back(y);
  }
  EXPECT_EQ(std::memcmp(ys[0].data(), ys[1].data(), ys[0].size() * sizeof(float)), 0);
}

// ParallelFor's grain is the least share of one thread: [0, n) in equal
// shares of at least `grain` items on as many threads as there are such
// shares (at most the kernel thread count), each item once; below two
// shares the caller runs it all.
TEST(Threads, ParallelForSharesHoldAtLeastTheGrain) {
  struct Share { std::int64_t b, e; };
  auto shares = [](int threads, std::int64_t n, std::int64_t grain) {
    cpu::UseThreads(threads);
    std::vector<Share> got(16, Share{-1, -1});
    std::atomic<int> calls{0};
    cpu::ParallelFor(n, grain, [&](std::int64_t b, std::int64_t e) {
      got[static_cast<std::size_t>(omp_get_thread_num())] = Share{b, e};
      ++calls;
    });
    cpu::UseThreads(1);
    std::vector<Share> out;
    for (const Share& s : got) {
      if (s.b >= 0) out.push_back(s);
    }
    EXPECT_EQ(static_cast<int>(out.size()), calls.load());
    return out;
  };
  // Where this build's OpenMP pragmas run serially (Clang on libgomp: the
  // ASan build), every call is one share.
  int team = 1;
#pragma omp parallel num_threads(2)
  {
    if (omp_get_thread_num() == 0) team = omp_get_num_threads();
  }
  struct Case { int threads; std::int64_t n, grain; std::size_t want; };
  for (const Case& c : {Case{4, 3 * 1000 + 5, 1000, 3}, Case{4, 100 * 1000, 1000, 4}, Case{4, 2 * 1000 - 1, 1000, 1},
                        Case{2, 2 * 1000, 1000, 2}, Case{2, 1999, 1000, 1}, Case{1, 100000, 1000, 1},
                        Case{8, 7, 1, 7}, Case{3, 5, 0, 3}}) {
    std::vector<Share> s = shares(c.threads, c.n, c.grain);
    ASSERT_EQ(s.size(), team > 1 ? c.want : 1) << c.threads << " threads, n " << c.n << ", grain " << c.grain;
    std::sort(s.begin(), s.end(), [](const Share& a, const Share& b) { return a.b < b.b; });
    std::int64_t next = 0;
    for (const Share& x : s) {
      EXPECT_EQ(x.b, next);
      if (s.size() > 1) {
        EXPECT_GE(x.e - x.b, std::max<std::int64_t>(1, c.grain)) << c.n << " / " << c.grain;
      }
      next = x.e;
    }
    EXPECT_EQ(next, c.n);
  }
}

// The kernel thread count belongs to the execution context: two threads
// using different counts at once each keep their own (and their own OpenMP
// setting), and two models with different counts run side by side.
TEST(Threads, PerContextThreadCountsDoNotInterfere) {
  std::atomic<int> bad{0};
  auto worker = [&](int n) {
    for (int i = 0; i < 2000; ++i) {
      cpu::UseThreads(n);
      if (cpu::NumThreads() != n || omp_get_max_threads() != n) ++bad;
    }
  };
  std::thread a(worker, 1), b(worker, 2);
  a.join();
  b.join();
  EXPECT_EQ(bad.load(), 0);

  test::TempDir dir;
  auto m = SmallModel();
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE(format::WriteModelFile(m.value(), dir.file("m.kiln")).ok());
  auto run_model = [&](int threads) {
    LoadOptions o;
    o.device = "cpu";
    o.threads = threads;
    auto model = Model::Load(dir.file("m.kiln"), o);
    if (!model.ok()) {
      ++bad;
      return;
    }
    std::vector<float> x = {1, 2, 3, 4, 5, 6}, y(6), z(6);
    for (int i = 0; i < 200; ++i) {
      if (!(*model)->Execute({TensorRef::Of(x.data(), {2, 3})},
                             {TensorRef::Of(y.data(), {2, 3}), TensorRef::Of(z.data(), {2, 3})}).ok() ||
          y != std::vector<float>{0, 4, 19, 6, 25, 46}) {
        ++bad;
      }
    }
  };
  std::thread c(run_model, 1), d(run_model, 2);
  c.join();
  d.join();
  EXPECT_EQ(bad.load(), 0);
}

// The chunked upload through pinned staging (CopyHeld): sim reads each
// staging buffer only when its delayed copy runs, so a buffer refilled
// before its copy had run would put the next chunk's bytes in its place.
TEST(SimDevice, StagedWeightUploadKeepsEachBufferUntilItsCopyHasRun) {
  test::TempDir dir;
  constexpr int kN = 16384;  // 64 KiB: 16 chunks of 4 KiB
  auto g = std::make_unique<ir::Graph>();
  g->set_name("staged");
  ir::Value* x = g->AddValue("x", DType::kFloat32, {kN});
  g->inputs().push_back(x);
  std::vector<float> wv(kN);
  for (int i = 0; i < kN; ++i) wv[i] = static_cast<float>(i);  // every chunk differs
  ir::Value* w = g->AddConstant("w", test::F32({kN}, wv));
  ir::Value* y = g->AddValue("y");
  g->AddNode("Add", "add", {x, w}, {y});
  g->outputs().push_back(y);
  test::SetLatestVersions(*g);
  CompileOptions co;
  co.external_weight = 2;
  co.external_weight_dir = dir.file("weight");
  auto cm = CompileGraph(std::move(g), co);
  ASSERT_TRUE(cm.ok()) << cm.status().ToString();
  ASSERT_TRUE(format::WriteModelFile(cm.value(), dir.file("m.kiln")).ok());
  for (int readers : {1, 3}) {  // each reader reads its share of every chunk
  for (WeightLoadMode mode : {WeightLoadMode::kCopy, WeightLoadMode::kStagedCopy}) {
    LoadOptions o;
    o.device = "sim:seed=5,delay_us=300";
    o.weight_load_mode = mode;
    o.weight_chunk_bytes = 4096;
    o.weight_reader_threads = readers;
    auto m = Model::Load(dir.file("m.kiln"), o);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    std::vector<float> xv(kN, 0.5f), yv(kN);
    ASSERT_TRUE((*m)->Execute({TensorRef::Of(xv.data(), {kN})}, {TensorRef::Of(yv.data(), {kN})}).ok());
    for (int i = 0; i < kN; ++i) ASSERT_EQ(yv[i], static_cast<float>(i) + 0.5f) << i << ", " << readers << " readers";
  }
  }
}

TEST(SimDevice, MapModeIsRefusedWithAClearMessage) {
  // A model with an external weight, loaded with an explicit map on sim.
  test::TempDir dir;
  auto g = std::make_unique<ir::Graph>();
  g->set_name("ext");
  ir::Value* x = g->AddValue("x", DType::kFloat32, {2048});
  g->inputs().push_back(x);
  std::vector<float> wv(2048);
  for (int i = 0; i < 2048; ++i) wv[i] = static_cast<float>(i % 7) - 3.f;
  ir::Value* w = g->AddConstant("w", test::F32({2048}, wv));  // 8 KiB: loaded into device memory
  ir::Value* y = g->AddValue("y");
  g->AddNode("Mul", "mul", {x, w}, {y});
  g->outputs().push_back(y);
  test::SetLatestVersions(*g);
  CompileOptions co;
  co.external_weight = 1;
  co.external_weight_dir = dir.file("weight");
  auto cm = CompileGraph(std::move(g), co);
  ASSERT_TRUE(cm.ok()) << cm.status().ToString();
  ASSERT_TRUE(format::WriteModelFile(cm.value(), dir.file("m.kiln")).ok());
  for (WeightLoadMode mode : {WeightLoadMode::kAuto, WeightLoadMode::kCopy, WeightLoadMode::kStagedCopy,
                              WeightLoadMode::kMap}) {
    LoadOptions o;
    o.device = "sim";
    o.weight_load_mode = mode;
    o.verify_weights = true;
    auto m = Model::Load(dir.file("m.kiln"), o);
    if (mode == WeightLoadMode::kMap) {
      ASSERT_FALSE(m.ok());
      EXPECT_NE(m.status().message().find("weight load mode 'map' is impossible on device 'sim'"), std::string::npos)
          << m.status().message();
      continue;
    }
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    std::vector<float> xv(2048, 2.f), yv(2048);
    ASSERT_TRUE((*m)->Execute({TensorRef::Of(xv.data(), {2048})}, {TensorRef::Of(yv.data(), {2048})}).ok());
    for (int i = 0; i < 2048; ++i) ASSERT_EQ(yv[i], 2.f * (static_cast<float>(i % 7) - 3.f)) << i;
  }
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// A Conv whose weights are a run-time input, run by a stream's worker
// thread: oneDNN primitives created at load and run on another thread need
// their own (user) scratchpad; this crashed before they had one.
TEST(DeviceModelCompare, ConvWithRuntimeWeightsRunsOnWorkerThreads) {
  test::TempDir dir;
  auto g = std::make_unique<ir::Graph>();
  g->set_name("conv");
  ir::Value* x = g->AddValue("x", DType::kFloat32, {1, 1, 3, 3});
  ir::Value* w = g->AddValue("w", DType::kFloat32, {1, 1, 2, 2});
  g->inputs().push_back(x);
  g->inputs().push_back(w);
  ir::Value* y = g->AddValue("y");
  g->AddNode("Conv", "conv", {x, w}, {y});
  g->outputs().push_back(y);
  test::SetLatestVersions(*g);
  auto cm = CompileGraph(std::move(g), {});
  ASSERT_TRUE(cm.ok()) << cm.status().ToString();
  ASSERT_TRUE(format::WriteModelFile(cm.value(), dir.file("m.kiln")).ok());
  // x = 1..9 (row-major 3x3), w = [[1, 0], [0, -1]]: y[i][j] = x[i][j] - x[i+1][j+1] = -4.
  std::vector<float> xv = {1, 2, 3, 4, 5, 6, 7, 8, 9}, wv = {1, 0, 0, -1};
  for (const char* dev : {"cpu", "sim"}) {
    LoadOptions o;
    o.device = dev;
    auto m = Model::Load(dir.file("m.kiln"), o);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    auto s = Stream::Create(dev);
    ASSERT_TRUE(s.ok());
    std::vector<float> yv(4, 0.f);
    ASSERT_TRUE((*m)->ExecuteAsync(**s, {TensorRef::Of(xv.data(), {1, 1, 3, 3}), TensorRef::Of(wv.data(), {1, 1, 2, 2})},
                                   {TensorRef::Of(yv.data(), {1, 1, 2, 2})}).ok());
    ASSERT_TRUE((*s)->Synchronize().ok()) << dev;
    EXPECT_EQ(yv, (std::vector<float>{-4, -4, -4, -4})) << dev;
  }
}

}  // namespace
}  // namespace kiln
