// oneDNN plumbing shared by the CPU kernels: the engine, a per-thread stream,
// plain memory descriptors and fused-activation post-ops.
#pragma once

#include <dnnl.hpp>

#include "backends/cpu/kernel.h"

namespace kiln::cpu {

dnnl::engine& DnnlEngine();
dnnl::stream& DnnlStream();  // thread_local

// Whether this CPU multiplies bfloat16 natively, as oneDNN sees it (its
// effective ISA, which $ONEDNN_MAX_CPU_ISA may lower): AVX512_BF16 or
// AMX-BF16. $KILN_BF16=off says no (A/B runs). The CPU device reports it as
// device::Capabilities::bf16_dot.
bool NativeBf16Dot();
// Whether this CPU has 8-bit dot products (VNNI or AMX-INT8), as oneDNN sees
// it (its effective ISA): oneDNN's int8 kernels are exact there for any
// 8-bit operands. The CPU device reports it as device::Capabilities::int8_dot.
bool NativeInt8Dot();
// Whether Kiln's own kernels may use AVX-512: the CPU has AVX-512F/BW/DQ/VL
// and oneDNN's effective ISA is an AVX-512 one. $ONEDNN_MAX_CPU_ISA=AVX2
// thus holds the whole engine to AVX2, as on a CPU without AVX-512 (Zen 2
// and 3, Intel client cores): the tests and benchmarks that cap oneDNN
// measure those CPUs' paths of Kiln's kernels too.
bool Avx512Allowed();
// Whether a convolution or matrix product doing `macs_per_input`
// multiply-adds per element of its activation input gains from bfloat16
// operands when its kernel runs on the calling thread's kernel thread count
// (NumThreads). Rounding the activation is a pass over it, and on several
// threads that pass and the product split the activation differently, so
// each core reads much of it from another core's cache: measured on a Zen 5
// (MobileNetV2's 1x1 convolutions, 2 threads), layers with 24-96
// multiply-adds per input element ran 1.1-1.8x slower in bfloat16 than in
// float32, 144-1280 at 0.67-0.93 (1.03 once); on one thread every one ran
// faster (0.50-0.91). Hence: one thread, always; more, from 128.
bool Bf16PaysOff(double macs_per_input);

// Plain row-major descriptor of `shape`.
dnnl::memory::desc PlainDesc(const Shape& shape, dnnl::memory::data_type dt = dnnl::memory::data_type::f32);
dnnl::memory::desc StridedDesc(const Shape& shape, const Shape& strides,
                               dnnl::memory::data_type dt = dnnl::memory::data_type::f32);

// oneDNN's library-managed scratchpad belongs to the thread that created the
// primitive (Debian's oneDNN keeps one per thread), so a primitive created at
// load and run by a stream's worker thread would find none and write through
// a null pointer. Every primitive here therefore uses a user scratchpad
// (attributes from UserScratchpad) bound, right before each execute, to the
// scratch memory of the thread that runs it: one buffer per thread, reused by
// every primitive (cache-hot, as oneDNN's own), found when it runs, not when
// the primitive was created.
// A key for a packed (blocked) weights layout, equal for equal layouts
// (device::PrepackCache); "" for layouts it does not describe (never shared).
std::string PackedLayoutKey(const dnnl::memory::desc& md);
dnnl::primitive_attr UserScratchpad(dnnl::primitive_attr attr = dnnl::primitive_attr());
// The calling thread's scratch memory, at least `bytes` (64-byte aligned;
// grows, never shrinks).
void* ThreadScratch(std::size_t bytes);
// Bound to the run's workspace (ExecContext::workspace: the executor sizes
// it from Kernel::workspace_bytes) when it is large enough, else (eager
// evaluation, or a kernel created at run time for new extents) to the
// calling thread's scratch memory.
struct Scratchpad {
  dnnl::memory mem;  // the primitive's scratchpad, its handle set by Bind
  std::size_t bytes = 0;
  const dnnl::memory& Bind(const device::ExecContext* ctx) {
    if (bytes) {
      mem.set_data_handle(ctx && ctx->workspace && ctx->workspace_bytes >= bytes ? ctx->workspace
                                                                                  : ThreadScratch(bytes));
    }
    return mem;
  }
};
template <typename PD>
Scratchpad ScratchpadFor(const PD& pd) {
  Scratchpad s;
  s.bytes = pd.scratchpad_desc().get_size();
  s.mem = dnnl::memory(pd.scratchpad_desc(), DnnlEngine(), nullptr);
  return s;
}

// A float32 operand rounded to bfloat16 each run into the kernel's
// workspace (ops::kBf16Attr: Conv's X, MatMul/Gemm's A), for a primitive
// that takes bfloat16 there. The reorder's own scratchpad sits at the
// workspace's start (used only while it runs); the rounded copy at Place's
// offset, after everything else the kernel keeps there.
class Bf16Rounding {
 public:
  // `from`: the operand's float32 layout; `to`: the primitive's bfloat16 one.
  void Init(const dnnl::memory::desc& from, const dnnl::memory::desc& to);
  std::size_t scratch_bytes() const { return scratch_.bytes; }
  // The rounded copy at the first 64-byte boundary at or after `after`.
  void Place(std::size_t after) { at_ = (after + 63) / 64 * 64; }
  // Workspace bytes up to the copy's end.
  std::size_t end() const { return at_ + bytes_; }
  // Rounds `src` into ws + Place's offset and points `dst` there.
  void Run(const void* src, std::uint8_t* ws, dnnl::memory& dst);

 private:
  dnnl::reorder reorder_;
  Scratchpad scratch_;
  dnnl::memory user_;
  std::size_t at_ = 0, bytes_ = 0;
};

// A convolution node's window (ops::ComputeWindow over x's spatial dims and
// the weights' kernel dims) in oneDNN's terms: dilations counted from 0.
struct DnnlConvWindow {
  dnnl::memory::dims strides, dilations, pads_begin, pads_end;
};
Result<DnnlConvWindow> ConvWindow(const ir::Node& node, const Shape& x, const Shape& w);
// Weights [O, I/G, k...] as oneDNN's grouped [G, O/G, I/G, k...] (as they are when G = 1).
Shape GroupedWeights(const Shape& w, std::int64_t group);

// Appends the node's fused activation (kiln.activation etc.) to `ops`.
Status AppendFusedActivation(const ir::Node& node, dnnl::post_ops& ops);

// Runs `fn` and converts a dnnl::error into a Status naming `what`.
template <typename Fn>
Status DnnlCall(const char* what, Fn&& fn) {
  try {
    fn();
    return Status::Ok();
  } catch (const dnnl::error& e) {
    return Error(StatusCode::kUnimplemented, what, ": oneDNN: ", e.what());
  }
}

}  // namespace kiln::cpu
