#include "backends/cpu/dnnl_util.h"

#include <cstdlib>
#include <new>

#include <cmath>
#include <limits>

#include "ops/fused_attrs.h"
#include "ops/window.h"

namespace kiln::cpu {

dnnl::engine& DnnlEngine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

dnnl::stream& DnnlStream() {
  thread_local dnnl::stream s(DnnlEngine());
  return s;
}

void Bf16Rounding::Init(const dnnl::memory::desc& from, const dnnl::memory::desc& to) {
  dnnl::reorder::primitive_desc rd(DnnlEngine(), from, DnnlEngine(), to, UserScratchpad());
  reorder_ = dnnl::reorder(rd);
  scratch_ = ScratchpadFor(rd);
  user_ = dnnl::memory(from, DnnlEngine(), nullptr);
  bytes_ = to.get_size();
}

void Bf16Rounding::Run(const void* src, std::uint8_t* ws, dnnl::memory& dst) {
  user_.set_data_handle(const_cast<void*>(src));
  dst.set_data_handle(ws + at_);
  if (scratch_.bytes) scratch_.mem.set_data_handle(ws);
  reorder_.execute(DnnlStream(), {{DNNL_ARG_FROM, user_}, {DNNL_ARG_TO, dst}, {DNNL_ARG_SCRATCHPAD, scratch_.mem}});
}

void* ThreadScratch(std::size_t bytes) {
  struct Buffer {
    void* p = nullptr;
    std::size_t size = 0;
    ~Buffer() { std::free(p); }
  };
  thread_local Buffer b;
  if (b.size < bytes) {
    const std::size_t size = (bytes + 4095) / 4096 * 4096;
    void* p = std::aligned_alloc(64, size);
    if (!p) throw std::bad_alloc();
    std::free(b.p);
    b.p = p;
    b.size = size;
  }
  return b.p;
}

dnnl::primitive_attr UserScratchpad(dnnl::primitive_attr attr) {
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

dnnl::memory::desc PlainDesc(const Shape& shape, dnnl::memory::data_type dt) {
  dnnl::memory::dims d(shape.begin(), shape.end());
  if (d.empty()) d = {1};
  dnnl::memory::dims st(d.size(), 1);
  for (int i = static_cast<int>(d.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * d[i + 1];
  return dnnl::memory::desc(d, dt, st);
}

dnnl::memory::desc StridedDesc(const Shape& shape, const Shape& strides, dnnl::memory::data_type dt) {
  return dnnl::memory::desc(dnnl::memory::dims(shape.begin(), shape.end()), dt,
                            dnnl::memory::dims(strides.begin(), strides.end()));
}

Status AppendFusedActivation(const ir::Node& node, dnnl::post_ops& ops) {
  const ir::Attribute* a = node.FindAttr(ops::kActAttr);
  if (!a) return Status::Ok();
  const float alpha = node.GetFloat(ops::kActAlphaAttr, 0.f);
  const float beta = node.GetFloat(ops::kActBetaAttr, 0.f);
  using alg = dnnl::algorithm;
  const std::string& t = a->s;
  const float big = std::numeric_limits<float>::max();
  if (t == "Relu") ops.append_eltwise(1.f, alg::eltwise_relu, 0.f, 0.f);
  else if (t == "LeakyRelu") ops.append_eltwise(1.f, alg::eltwise_relu, alpha, 0.f);
  else if (t == "Sigmoid") ops.append_eltwise(1.f, alg::eltwise_logistic, 0.f, 0.f);
  else if (t == "Tanh") ops.append_eltwise(1.f, alg::eltwise_tanh, 0.f, 0.f);
  else if (t == "HardSwish") ops.append_eltwise(1.f, alg::eltwise_hardswish, 0.f, 0.f);
  else if (t == "Swish") ops.append_eltwise(1.f, alg::eltwise_swish, alpha, 0.f);  // x * sigmoid(alpha x)
  else if (t == "Gelu") ops.append_eltwise(1.f, alg::eltwise_gelu_erf, 0.f, 0.f);  // kiln.Gelu's erf form
  else if (t == "Clip") ops.append_eltwise(1.f, alg::eltwise_clip_v2, std::isinf(alpha) ? -big : alpha, std::isinf(beta) ? big : beta);
  else if (t == "HardSigmoid") {
    ops.append_eltwise(1.f, alg::eltwise_linear, alpha, beta);
    ops.append_eltwise(1.f, alg::eltwise_clip_v2, 0.f, 1.f);
  } else {
    return Error(StatusCode::kUnimplemented, node.Describe(), ": unknown fused activation '", t, "'");
  }
  return Status::Ok();
}

bool NativeBf16Dot() {
  static const bool yes = [] {
    const char* env = std::getenv("KILN_BF16");
    if (env && std::string(env) == "off") return false;
    const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
    return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
  }();
  return yes;
}

bool NativeInt8Dot() {
  static const bool yes = [] {
    const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
    return isa == dnnl::cpu_isa::avx512_core_vnni || isa == dnnl::cpu_isa::avx512_core_bf16 ||
           isa == dnnl::cpu_isa::avx512_core_amx || isa == dnnl::cpu_isa::avx2_vnni;
  }();
  return yes;
}

bool Avx512Allowed() {
  static const bool yes = [] {
    const bool cpu = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                     __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
    // oneDNN's ISA values are bit sets, each containing those it extends:
    // every AVX-512 level past avx512_core (VNNI, BF16, AMX, later ones)
    // contains avx512_core's bits; avx2_vnni and avx512_mic do not.
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const auto core = static_cast<unsigned>(dnnl::cpu_isa::avx512_core);
    return cpu && (isa & core) == core;
  }();
  return yes;
}

bool Bf16PaysOff(double macs_per_input) { return NumThreads() <= 1 || macs_per_input >= 128; }

std::string PackedLayoutKey(const dnnl::memory::desc& md) {
  const dnnl_memory_desc_t& d = md.data;
  if (d.format_kind != dnnl_blocked || d.ndims < 0 || d.ndims > DNNL_MAX_NDIMS) return std::string();
  const dnnl_blocking_desc_t& b = d.format_desc.blocking;
  if (b.inner_nblks < 0 || b.inner_nblks > DNNL_MAX_NDIMS) return std::string();
  std::string k = StrCat("t", static_cast<int>(d.data_type), "o", d.offset0, "x", d.extra.flags, ",",
                         d.extra.compensation_mask, ",", d.extra.scale_adjust, ":");
  for (int i = 0; i < d.ndims; ++i) {
    k += StrCat(d.dims[i], "/", d.padded_dims[i], "/", d.padded_offsets[i], "/", b.strides[i], ";");
  }
  k += "b";
  for (int i = 0; i < b.inner_nblks; ++i) k += StrCat(b.inner_blks[i], "@", b.inner_idxs[i], ";");
  return k;
}

Result<DnnlConvWindow> ConvWindow(const ir::Node& node, const Shape& x, const Shape& w) {
  KILN_ASSIGN_OR_RETURN(ops::Window win, ops::ComputeWindow(node, Shape(x.begin() + 2, x.end()),
                                                            std::vector<std::int64_t>(w.begin() + 2, w.end()), false));
  DnnlConvWindow d;
  d.strides.assign(win.strides.begin(), win.strides.end());
  d.pads_begin.assign(win.pads_begin.begin(), win.pads_begin.end());
  d.pads_end.assign(win.pads_end.begin(), win.pads_end.end());
  for (std::int64_t v : win.dilations) d.dilations.push_back(v - 1);
  return d;
}

Shape GroupedWeights(const Shape& w, std::int64_t group) {
  if (group <= 1) return w;
  Shape wg = {group, w[0] / group};
  wg.insert(wg.end(), w.begin() + 1, w.end());
  return wg;
}

}  // namespace kiln::cpu
