// oneDNN plumbing shared by the CPU kernels: the engine, a per-thread stream,
// plain memory descriptors and fused-activation post-ops.
#pragma once

#include <dnnl.hpp>

#include "backends/cpu/kernel.h"

namespace kiln::cpu {

dnnl::engine& DnnlEngine();
dnnl::stream& DnnlStream();  // thread_local

// Plain row-major descriptor of `shape`.
dnnl::memory::desc PlainDesc(const Shape& shape, dnnl::memory::data_type dt = dnnl::memory::data_type::f32);
dnnl::memory::desc StridedDesc(const Shape& shape, const Shape& strides,
                               dnnl::memory::data_type dt = dnnl::memory::data_type::f32);

// oneDNN's library-managed scratchpad belongs to the thread that created the
// primitive (Debian's oneDNN keeps one per thread), so a primitive created at
// load and run by a stream's worker thread would find none and write through
// a null pointer. Every primitive here therefore uses a user scratchpad that
// its kernel owns: attributes with UserScratchpad, memory from
// ScratchpadFor(pd) passed as DNNL_ARG_SCRATCHPAD.
dnnl::primitive_attr UserScratchpad(dnnl::primitive_attr attr = dnnl::primitive_attr());
template <typename PD>
dnnl::memory ScratchpadFor(const PD& pd) {
  return dnnl::memory(pd.scratchpad_desc(), DnnlEngine());
}

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
