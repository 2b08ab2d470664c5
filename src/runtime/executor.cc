#include "runtime/executor.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <unordered_map>

#include "common/checked.h"
#include "ops/op_registry.h"
#include "runtime/stream_impl.h"

namespace kiln::runtime {
namespace {

class EagerCtx final : public EagerExecuteContext {
 public:
  EagerCtx(std::vector<ArgBlock>& blocks, std::vector<std::vector<std::uint8_t>>& workspaces, CustomNode& cn,
           std::vector<void*> in, std::vector<void*> out, Stream& stream)
      : blocks_(blocks), workspaces_(workspaces), cn_(cn), in_(std::move(in)), out_(std::move(out)),
        stream_(stream), attrs_(*cn.node) {}
  const std::string& node_name() const override { return cn_.node->name(); }
  int num_inputs() const override { return static_cast<int>(cn_.inputs.size()); }
  int num_outputs() const override { return static_cast<int>(cn_.outputs.size()); }
  const OpAttributes& attributes() const override { return attrs_; }
  Result<DeviceTensor> GetInputTensor(int i) override {
    if (i < 0 || i >= num_inputs()) return Range("GetInputTensor", i, num_inputs());
    const Binding& b = cn_.inputs[i];
    return DeviceTensor{in_[i], b.dtype, b.shape, b.bytes};
  }
  Result<DeviceTensor> MallocOutputTensor(int i) override {
    if (i < 0 || i >= num_outputs()) return Range("MallocOutputTensor", i, num_outputs());
    const Binding& b = cn_.outputs[i];
    return DeviceTensor{out_[i], b.dtype, b.shape, b.bytes};
  }
  Result<void*> MallocWorkspace(std::size_t bytes) override {
    workspaces_.emplace_back(bytes + 64);
    return static_cast<void*>(workspaces_.back().data());
  }
  Result<const void*> MallocReadOnlyDevArgs(const void* host_args, std::size_t size) override {
    if (!host_args || size == 0) {
      return Error(StatusCode::kInvalidArgument, "node '", node_name(), "': MallocReadOnlyDevArgs needs a non-empty block");
    }
    ArgBlock b;
    b.host.assign(static_cast<const std::uint8_t*>(host_args), static_cast<const std::uint8_t*>(host_args) + size);
    b.dev = b.host;
    cn_.blocks.push_back(static_cast<int>(blocks_.size()));
    blocks_.push_back(std::move(b));
    return static_cast<const void*>(blocks_.back().dev.data());
  }
  Stream& GetStream() override { return stream_; }

 private:
  Status Range(const char* fn, int i, int n) const {
    return Error(StatusCode::kOutOfRange, "node '", node_name(), "': ", fn, "(", i, "): index out of range 0..", n - 1);
  }
  std::vector<ArgBlock>& blocks_;
  std::vector<std::vector<std::uint8_t>>& workspaces_;
  CustomNode& cn_;
  std::vector<void*> in_, out_;
  Stream& stream_;
  custom::NodeAttributes attrs_;
};

class UpdaterCtx final : public ArgsUpdaterContext {
 public:
  UpdaterCtx(std::vector<ArgBlock>& blocks, const CustomNode& cn, std::vector<void*> in, std::vector<void*> out)
      : blocks_(blocks), cn_(cn), in_(std::move(in)), out_(std::move(out)) {}
  const std::string& node_name() const override { return cn_.node->name(); }
  int num_inputs() const override { return static_cast<int>(cn_.inputs.size()); }
  int num_outputs() const override { return static_cast<int>(cn_.outputs.size()); }
  Result<DeviceTensor> GetInputTensor(int i) override {
    if (i < 0 || i >= num_inputs()) return Range("GetInputTensor", i, num_inputs());
    const Binding& b = cn_.inputs[i];
    return DeviceTensor{in_[i], b.dtype, b.shape, b.bytes};
  }
  Result<DeviceTensor> GetOutputTensor(int i) override {
    if (i < 0 || i >= num_outputs()) return Range("GetOutputTensor", i, num_outputs());
    const Binding& b = cn_.outputs[i];
    return DeviceTensor{out_[i], b.dtype, b.shape, b.bytes};
  }
  Result<void*> GetKernelArgs(Placement placement, int index) override {
    if (index < 0 || index >= static_cast<int>(cn_.blocks.size())) {
      return Range("GetKernelArgs", index, static_cast<int>(cn_.blocks.size()));
    }
    ArgBlock& b = blocks_[cn_.blocks[index]];
    return static_cast<void*>(placement == Placement::kHost ? b.host.data() : b.dev.data());
  }
  std::size_t num_kernel_args() const override { return cn_.blocks.size(); }

 private:
  Status Range(const char* fn, int i, int n) const {
    return Error(StatusCode::kOutOfRange, "node '", node_name(), "': ", fn, "(", i, "): index out of range 0..", n - 1);
  }
  std::vector<ArgBlock>& blocks_;
  const CustomNode& cn_;
  std::vector<void*> in_, out_;
};

}  // namespace

Executor::~Executor() {
  std::free(arena_);
  for (void* p : placeholders_) std::free(p);
}

void* Executor::Address(const Binding& b) const {
  if (b.region < 0) return b.fixed;
  return bases_[b.region] ? bases_[b.region] + b.offset : nullptr;
}

Result<std::unique_ptr<Executor>> Executor::Create(const ir::Graph& graph, const plan::MemoryPlan& plan,
                                                   const ExecutorOptions& opts) {
  std::unique_ptr<Executor> ex(new Executor());
  ex->graph_ = &graph;
  const std::size_t n_in = graph.inputs().size();
  const std::size_t num_regions = plan::kRegionIoBase + n_in + graph.outputs().size();
  ex->region_refs_.resize(num_regions);
  ex->bases_.assign(num_regions, nullptr);
  ex->arena_size_ = plan.arena_size;
  // Not zero-filled and not touched here: no kernel reads arena bytes it did
  // not write in the same run, and a model too large for the machine fails
  // here with an error instead of being killed while pages are touched.
  std::uint64_t arena_alloc = 0;
  if (!CheckedAddU(plan.arena_size, plan::kAlignment, &arena_alloc)) {
    return Error(StatusCode::kOutOfRange, "arena of ", plan.arena_size, " bytes is too large to allocate");
  }
  arena_alloc = arena_alloc / plan::kAlignment * plan::kAlignment;
  ex->arena_ = static_cast<std::uint8_t*>(std::aligned_alloc(plan::kAlignment, arena_alloc));
  if (!ex->arena_) {
    return Error(StatusCode::kOutOfRange, "cannot allocate the arena of ", plan.arena_size, " bytes: ",
                 std::strerror(errno));
  }
  ex->bases_[plan::kRegionArena] = ex->arena_;
  // Stand-ins for the caller's buffers until the first run binds real ones
  // (custom ops record their launches against them). calloc: untouched pages.
  for (std::size_t i = 0; i + plan::kRegionIoBase < num_regions; ++i) {
    const ir::Value* v = i < n_in ? graph.inputs()[i] : graph.outputs()[i - n_in];
    auto bytes = CheckedTensorBytes(v->dtype(), v->shape(), StrCat("'", v->name(), "'"));
    if (!bytes.ok()) return bytes.status();
    void* p = std::calloc(1, static_cast<std::size_t>(bytes.value()) + 64);
    if (!p) {
      return Error(StatusCode::kOutOfRange, "cannot allocate a stand-in of ", bytes.value(), " bytes for '",
                   v->name(), "'");
    }
    ex->placeholders_.push_back(p);
    ex->bases_[plan::kRegionIoBase + i] = static_cast<std::uint8_t*>(p);
  }

  // check_bounds: one guarded allocation per arena tensor (views share their
  // source's) instead of the shared arena.
  std::unordered_map<const ir::Value*, GuardedBuffer*> guarded_of;
  auto binding = [&](const ir::Value* v, const ir::Node& node) -> Result<Binding> {
    Binding b;
    b.dtype = v->dtype();
    b.shape = v->shape();
    b.bytes = static_cast<std::uint64_t>(NumElements(v->shape())) * DTypeSize(v->dtype());
    if (v->is_constant()) {
      b.fixed = const_cast<void*>(v->constant()->data());
      return b;
    }
    auto it = plan.placements.find(v->name());
    if (it == plan.placements.end()) {
      return Error(StatusCode::kCorrupt, node.Describe(), ": value '", v->name(), "' has no placement");
    }
    const plan::Placement& p = it->second;
    if (p.region <= plan::kRegionConst || static_cast<std::size_t>(p.region) >= num_regions) {
      return Error(StatusCode::kCorrupt, "value '", v->name(), "' placed in invalid region ", p.region);
    }
    if (p.size != b.bytes ||
        (p.region == plan::kRegionArena && (p.offset > plan.arena_size || p.size > plan.arena_size - p.offset))) {
      return Error(StatusCode::kCorrupt, "value '", v->name(), "' placement [", p.offset, ", +", p.size,
                   ") does not fit region ", p.region);
    }
    if (opts.check_bounds && p.region == plan::kRegionArena) {
      GuardedBuffer*& g = guarded_of[v];
      if (!g) {
        auto gb = std::make_unique<GuardedBuffer>();
        gb->bytes.assign(p.size + 2 * GuardedBuffer::kGuard, GuardedBuffer::kPattern);
        gb->size = p.size;
        gb->name = v->name();
        g = gb.get();
        ex->guarded_.push_back(std::move(gb));
      }
      b.fixed = g->data();
      return b;
    }
    b.region = p.region;
    b.offset = p.offset;
    return b;
  };

  auto shape_id = [&](const ir::Value* v) -> int {
    if (!v || !v->is_dynamic()) return -1;
    auto [it, added] = ex->shape_ids_.emplace(v, static_cast<int>(ex->shapes_.size()));
    if (added) ex->shapes_.push_back(v->shape());
    return it->second;
  };
  // Nodes touching data-dependent extents get a private copy whose input
  // shapes are set per run.
  auto make_dynamic = [&](const ir::Node& node) -> std::unique_ptr<DynamicTask> {
    bool dynamic = false;
    for (const ir::Value* v : node.inputs()) dynamic |= v && v->is_dynamic();
    for (const ir::Value* v : node.outputs()) dynamic |= v->is_dynamic();
    if (!dynamic) return nullptr;
    auto d = std::make_unique<DynamicTask>();
    d->scratch = std::make_unique<ir::Graph>();
    d->clone = d->scratch->AddCopyOf(node);
    for (const ir::Value* v : node.inputs()) d->in_ids.push_back(shape_id(v));
    for (const ir::Value* v : node.outputs()) {
      d->out_ids.push_back(shape_id(v));
      d->out_bound_bytes.push_back(static_cast<std::uint64_t>(NumElements(v->shape())) * DTypeSize(v->dtype()));
      d->out_static.push_back(v->shape());
      d->out_masks.push_back(v->dynamic_mask());
    }
    d->self_shaped = node.op_type() == "If" && node.domain().empty();
    return d;
  };

  for (auto& node_ptr : graph.nodes()) {
    const ir::Node& node = *node_ptr;
    if (node.GetInt(plan::kAliasAttr, 0) == 1) {  // view: shares its input's bytes
      if (auto d = make_dynamic(node)) {  // its extents still follow its input's
        d->alias = true;
        Task t;
        t.node = &node;
        t.dyn = std::move(d);
        ex->tasks_.push_back(std::move(t));
      }
      if (opts.check_bounds) {
        auto it = guarded_of.find(node.input(0));
        if (it != guarded_of.end()) guarded_of[node.output(0)] = it->second;
      }
      continue;
    }
    if (custom::IsCustomNode(node)) {
      CustomNode cn;
      cn.node = &node;
      cn.op = custom::Find(node.op_type());
      std::vector<void*> in, out;
      for (const ir::Value* v : node.inputs()) {
        if (!v) return Error(StatusCode::kUnimplemented, node.Describe(), ": absent optional inputs are not supported for custom ops");
        KILN_ASSIGN_OR_RETURN(Binding b, binding(v, node));
        in.push_back(ex->Address(b));
        cn.inputs.push_back(b);
      }
      for (const ir::Value* v : node.outputs()) {
        KILN_ASSIGN_OR_RETURN(Binding b, binding(v, node));
        out.push_back(ex->Address(b));
        cn.outputs.push_back(b);
      }
      for (auto* list : {&cn.inputs, &cn.outputs}) {
        for (const Binding& b : *list) {
          if (b.region >= plan::kRegionIoBase) cn.regions.insert(b.region);
        }
      }
      Stream* stream = opts.load_stream;
      if (!stream) {
        if (!ex->own_load_stream_) {
          KILN_ASSIGN_OR_RETURN(ex->own_load_stream_, Stream::Create());
        }
        stream = ex->own_load_stream_.get();
      }
      std::vector<CapturedLaunch> captured;
      EagerCtx ctx(ex->blocks_, ex->workspaces_, cn, in, out, *stream);
      stream->impl()->capture = &captured;
      Status st = cn.op->eager->Execute(ctx);
      stream->impl()->capture = nullptr;
      if (!st.ok()) return st.WithContext(StrCat("custom op ", node.Describe(), ": Execute"));
      if (captured.empty()) {
        return Error(StatusCode::kInvalidArgument, "custom op ", node.Describe(),
                     ": Execute launched no kernel on the context's stream");
      }
      for (const CapturedLaunch& l : captured) {
        Task t;
        t.fn = l.fn;
        t.fn_args = l.args;
        t.node = &node;
        ex->tasks_.push_back(std::move(t));
      }
      ex->custom_.push_back(std::move(cn));
      continue;
    }
    Task task;
    task.node = &node;
    task.num_inputs = node.num_inputs();
    task.block = static_cast<int>(ex->blocks_.size());
    const std::size_t n_slots = node.num_inputs() + node.num_outputs();
    ArgBlock block;
    block.host.assign(n_slots * sizeof(void*), 0);
    auto* slots = reinterpret_cast<void**>(block.host.data());
    cpu::KernelInit init;
    init.node = &node;
    auto bind = [&](const ir::Value* v, std::uint32_t slot, bool output) -> Status {
      KILN_ASSIGN_OR_RETURN(Binding b, binding(v, node));
      slots[slot] = ex->Address(b);
      if (b.region >= 0) {
        ex->region_refs_[b.region].push_back({static_cast<std::uint32_t>(task.block), slot, b.offset});
      } else if (output && opts.check_bounds && !v->is_constant()) {
        for (auto& g : ex->guarded_) {
          if (g->data() == b.fixed) task.guarded_outputs.push_back(g.get());
        }
      }
      return Status::Ok();
    };
    for (int i = 0; i < node.num_inputs(); ++i) {
      const ir::Value* v = node.input(i);
      cpu::TensorDesc d;
      if (v) {
        d = {v->dtype(), v->shape()};
        KILN_RETURN_IF_ERROR(bind(v, static_cast<std::uint32_t>(i), false));
      }
      init.inputs.push_back(d);
      init.const_inputs.push_back(v && v->is_constant() ? v->constant().get() : nullptr);
    }
    for (int j = 0; j < node.num_outputs(); ++j) {
      const ir::Value* v = node.output(j);
      init.outputs.push_back({v->dtype(), v->shape()});
      KILN_RETURN_IF_ERROR(bind(v, static_cast<std::uint32_t>(node.num_inputs() + j), true));
    }
    task.dyn = make_dynamic(node);
    if (!task.dyn) {
      KILN_ASSIGN_OR_RETURN(task.kernel, cpu::CreateKernel(init));
    }
    block.dev = block.host;
    ex->blocks_.push_back(std::move(block));
    ex->tasks_.push_back(std::move(task));
  }
  return ex;
}

Status Executor::Refresh(const std::vector<void*>& io, std::uint64_t* refreshed) {
  std::vector<int> changed;
  for (std::size_t i = 0; i < io.size(); ++i) {
    const int r = plan::kRegionIoBase + static_cast<int>(i);
    auto* base = static_cast<std::uint8_t*>(io[i]);
    if (bases_[r] == base) continue;
    bases_[r] = base;
    changed.push_back(r);
    for (const SlotRef& s : region_refs_[r]) {
      ArgBlock& b = blocks_[s.block];
      reinterpret_cast<void**>(b.host.data())[s.index] = base + s.offset;
      b.dirty = true;
      ++*refreshed;
    }
  }
  if (changed.empty() || custom_.empty()) return Status::Ok();
  for (CustomNode& cn : custom_) {
    bool touched = false;
    for (int r : changed) touched |= cn.regions.count(r) != 0;
    if (!touched) continue;
    Status st;
    if (!cn.op->updater) {
      st = Error(StatusCode::kInternal, "custom op ", cn.node->Describe(),
                 " is not refreshable (no ArgsUpdater) but reads or writes a model input/output directly");
    } else {
      std::vector<void*> in, out;
      for (const Binding& b : cn.inputs) in.push_back(Address(b));
      for (const Binding& b : cn.outputs) out.push_back(Address(b));
      UpdaterCtx ctx(blocks_, cn, std::move(in), std::move(out));
      st = cn.op->updater->UpdateHostArgs(ctx);
      if (!st.ok()) st = st.WithContext(StrCat("custom op ", cn.node->Describe(), ": UpdateHostArgs failed"));
    }
    if (!st.ok()) {
      for (int r : changed) bases_[r] = nullptr;  // the next run refreshes again
      return st;
    }
    for (int b : cn.blocks) blocks_[b].dirty = true;
    *refreshed += cn.blocks.size();
  }
  return Status::Ok();
}

Shape Executor::ValueShape(const ir::Value* v) const {
  auto it = shape_ids_.find(v);
  return it == shape_ids_.end() ? v->shape() : shapes_[it->second];
}

Status Executor::SetInputShapes(const std::vector<Shape>& shapes) {
  for (std::size_t i = 0; i < shapes.size() && i < graph_->inputs().size(); ++i) {
    const ir::Value* v = graph_->inputs()[i];
    if (shapes[i] == v->shape()) {
      auto it = shape_ids_.find(v);
      if (it != shape_ids_.end()) shapes_[it->second] = shapes[i];
      continue;
    }
    const std::int64_t n = NumElements(shapes[i]);
    if (!v->is_dynamic() || shapes[i].size() != v->shape().size() || n < 0 || n > NumElements(v->shape())) {
      return Error(StatusCode::kInvalidArgument, "input '", v->name(), "' has shape ", ShapeToString(shapes[i]),
                   ", expected ", ShapeToString(v->shape(), v->dynamic_mask()));
    }
    auto it = shape_ids_.find(v);
    if (it != shape_ids_.end()) shapes_[it->second] = shapes[i];
  }
  return Status::Ok();
}

Status Executor::RunDynamic(Task& t) {
  DynamicTask& d = *t.dyn;
  ir::Node& c = *d.clone;
  std::vector<Shape> key;
  for (int i = 0; i < c.num_inputs(); ++i) {
    ir::Value* v = c.input(i);
    if (!v) {
      key.emplace_back();
      continue;
    }
    if (d.in_ids[i] >= 0) v->set_shape(shapes_[d.in_ids[i]]);
    key.push_back(v->shape());
  }
  std::vector<Shape> outs = d.out_static;  // If: its branch reports the extents
  if (!d.self_shaped) {
    if (d.have_last && d.last_in == key) {
      outs = d.last_inferred;
    } else {
      d.have_last = false;
      Status st = ops::InferNodeShapesOnly(c);
      if (!st.ok()) return st.WithContext(StrCat("at run time, with input shapes from data-dependent extents"));
      for (std::size_t j = 0; j < outs.size(); ++j) outs[j] = c.output(static_cast<int>(j))->shape();
      d.last_in = key;
      d.last_inferred = outs;
      d.have_last = true;
    }
  }
  static const std::vector<Shape> kAnyShapes;
  const std::vector<Shape>& cache_key = d.self_shaped ? kAnyShapes : key;  // If: one kernel for all shapes
  // Outputs that are all empty need no kernel (oneDNN rejects some empty
  // problems, e.g. a Gemm with M = 0): zero detections is a normal run.
  bool all_empty = !outs.empty();
  for (const Shape& s : outs) all_empty &= NumElements(s) == 0;
  auto check = [&](const std::vector<Shape>& shapes) -> Status {
    for (std::size_t j = 0; j < shapes.size(); ++j) {
      const ir::Value* o = c.output(static_cast<int>(j));
      const std::int64_t n = NumElements(shapes[j]);
      if (n < 0 || static_cast<std::uint64_t>(n) * DTypeSize(o->dtype()) > d.out_bound_bytes[j]) {
        return Error(StatusCode::kOutOfRange, t.node->Describe(), ": output '", o->name(), "' has run-time shape ",
                     ShapeToString(shapes[j]), ", larger than its planned bound ",
                     ShapeToString(d.out_static[j], d.out_masks[j]));
      }
      if (d.out_masks[j] == 0 && shapes[j] != d.out_static[j]) {
        std::string ins;
        for (const Shape& s : key) ins += (ins.empty() ? "" : ", ") + ShapeToString(s);
        return Error(StatusCode::kInternal, t.node->Describe(), ": output '", o->name(), "' has run-time shape ",
                     ShapeToString(shapes[j]), " for input shapes ", ins, ", but Kiln's compile-time analysis of ",
                     "data-dependent extents judged it static ", ShapeToString(d.out_static[j]),
                     " (a limitation of that analysis; please report it with the model)");
      }
    }
    return Status::Ok();
  };
  KILN_RETURN_IF_ERROR(check(outs));
  if (!d.alias && !all_empty) {
    auto it = d.kernels.find(cache_key);
    if (it == d.kernels.end()) {
      cpu::KernelInit init;
      init.node = &c;
      for (int i = 0; i < c.num_inputs(); ++i) {
        const ir::Value* v = c.input(i);
        const Shape s = !v ? Shape{} : d.self_shaped ? t.node->input(i)->shape() : v->shape();
        init.inputs.push_back(v ? cpu::TensorDesc{v->dtype(), s} : cpu::TensorDesc{});
        init.const_inputs.push_back(v && v->is_constant() ? v->constant().get() : nullptr);
      }
      for (std::size_t j = 0; j < outs.size(); ++j) init.outputs.push_back({c.output(static_cast<int>(j))->dtype(), outs[j]});
      auto k = cpu::CreateKernel(init);
      if (!k.ok()) return k.status().WithContext(StrCat(t.node->Describe(), " at run time"));
      if (d.kernels.size() >= 16) d.kernels.clear();  // shapes keep changing: bound the cache
      it = d.kernels.emplace(cache_key, std::move(k).value()).first;
    }
    cpu::KernelArgs args{reinterpret_cast<void* const*>(blocks_[t.block].dev.data()), t.num_inputs, outs.data(),
                         key.data()};
    KILN_RETURN_IF_ERROR(it->second->Run(args).WithContext(t.node->Describe()));
    KILN_RETURN_IF_ERROR(check(outs));
  }
  for (std::size_t j = 0; j < outs.size(); ++j) {
    if (d.out_ids[j] >= 0) shapes_[d.out_ids[j]] = outs[j];
  }
  return Status::Ok();
}

Status Executor::Replay() {
  // One try around the whole list (no per-task cost): an exception from a
  // kernel becomes an error naming the task's node.
  std::size_t at = 0;
  try {
    return ReplayFrom(&at);
  } catch (const std::bad_alloc&) {
    return Error(StatusCode::kOutOfRange, tasks_[at].node->Describe(), ": out of memory while running");
  } catch (const std::exception& e) {
    return Error(StatusCode::kInternal, tasks_[at].node->Describe(), ": kernel failed: ", e.what());
  }
}

Status Executor::ReplayFrom(std::size_t* at) {
  for (*at = 0; *at < tasks_.size(); ++*at) {
    Task& t = tasks_[*at];
    if (t.dyn) {
      KILN_RETURN_IF_ERROR(RunDynamic(t));
    } else if (t.kernel) {
      cpu::KernelArgs args{reinterpret_cast<void* const*>(blocks_[t.block].dev.data()), t.num_inputs};
      Status st = t.kernel->Run(args);
      if (!st.ok()) return st.WithContext(t.node->Describe());
    } else {
      t.fn(t.fn_args);
    }
    for (GuardedBuffer* b : t.guarded_outputs) {
      for (std::uint64_t i = 0; i < GuardedBuffer::kGuard; ++i) {
        const bool before = b->bytes[i] != GuardedBuffer::kPattern;
        const bool after = b->bytes[GuardedBuffer::kGuard + b->size + i] != GuardedBuffer::kPattern;
        if (before || after) {
          return Error(StatusCode::kInternal, t.node->Describe(), " wrote out of bounds of tensor '", b->name,
                       "' (", b->size, " bytes): guard byte ", before ? "before" : "after",
                       " the buffer was overwritten");
        }
      }
    }
  }
  return Status::Ok();
}

Status Executor::Run(const std::vector<void*>& io, ExecutionStats* stats) {
  std::uint64_t refreshed = 0;
  KILN_RETURN_IF_ERROR(Refresh(io, &refreshed));
  for (ArgBlock& b : blocks_) {
    if (!b.dirty) continue;
    std::memcpy(b.dev.data(), b.host.data(), b.host.size());
    b.dirty = false;
  }
  KILN_RETURN_IF_ERROR(Replay());
  if (stats) {
    stats->tasks_run = tasks_.size();
    stats->slots_refreshed = refreshed;
  }
  return Status::Ok();
}

Status Executor::Enqueue(Stream& stream, const std::vector<void*>& io, ExecutionStats* stats,
                         std::shared_ptr<const void> keepalive) {
  std::uint64_t refreshed = 0;
  KILN_RETURN_IF_ERROR(Refresh(io, &refreshed));
  // Snapshot the changed host blocks now: a later refresh must not leak into
  // this run, and a run in flight keeps reading the device copies untouched
  // until this task reaches it on the stream.
  std::vector<std::pair<int, std::vector<std::uint8_t>>> snap;
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    if (!blocks_[i].dirty) continue;
    snap.emplace_back(static_cast<int>(i), blocks_[i].host);
    blocks_[i].dirty = false;
  }
  const int threads = cpu::NumThreads();
  // The queued work holds `keepalive` (the model owning this executor): a
  // model destroyed while this is queued lives on until the work is done.
  KILN_RETURN_IF_ERROR(stream.LaunchHostFunc([this, snap = std::move(snap), threads, keep = std::move(keepalive)]() {
    for (auto& [i, bytes] : snap) std::memcpy(blocks_[i].dev.data(), bytes.data(), bytes.size());
    cpu::SetNumThreads(threads);
    return Replay();
  }));
  if (stats) {
    stats->tasks_run = tasks_.size();
    stats->slots_refreshed = refreshed;
  }
  return Status::Ok();
}

}  // namespace kiln::runtime
