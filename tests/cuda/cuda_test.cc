// The CUDA backend (src/backends/cuda). NVRTC compiles without a GPU, so
// compilation and its cache are tested on every machine with the toolkit;
// the device tests run where a GPU is present and skip with the driver's
// reason elsewhere (scripts/gpu-check.sh runs them on a GPU machine).
// Expected values are hand-derived (a + b, element by element).
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "backends/cuda/cuda_device.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/nvrtc.h"
#include "ir/graph.h"
#include "kiln/stream.h"

namespace kiln::cuda {
namespace {

const char* kAddSource = R"(
extern "C" __global__ void add(void* const* ptrs, long n) {
  const float* a = static_cast<const float*>(ptrs[0]);
  const float* b = static_cast<const float*>(ptrs[1]);
  float* c = static_cast<float*>(ptrs[2]);
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
)";

// A fresh cache directory per test.
class CacheDir {
 public:
  CacheDir() {
    char tmpl[] = "/tmp/kiln_nvrtc_test_XXXXXX";
    dir_ = mkdtemp(tmpl);
    old_ = std::getenv("KILN_RTC_CACHE_DIR") ? std::getenv("KILN_RTC_CACHE_DIR") : "";
    setenv("KILN_RTC_CACHE_DIR", dir_.c_str(), 1);
  }
  ~CacheDir() {
    if (old_.empty()) {
      unsetenv("KILN_RTC_CACHE_DIR");
    } else {
      setenv("KILN_RTC_CACHE_DIR", old_.c_str(), 1);
    }
    std::string cmd = "rm -rf '" + dir_ + "'";
    (void)std::system(cmd.c_str());
  }
  const std::string& path() const { return dir_; }

 private:
  std::string dir_, old_;
};

TEST(Nvrtc, CompilesForSm90WithoutAGpuAndCaches) {
  CacheDir cache;
  const NvrtcStats before = GetNvrtcStats();
  auto p = CompileCuda("add", kAddSource, 90);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_GT(p->cubin.size(), 64u);
  EXPECT_EQ(std::memcmp(p->cubin.data(), "\x7f" "ELF", 4), 0);
  EXPECT_EQ(p->key.size(), 64u);
  EXPECT_FALSE(p->from_cache);
  struct stat st;
  EXPECT_EQ(::stat((cache.path() + "/" + p->key + ".rtc").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 077, 0u);  // private to the user

  auto again = CompileCuda("add", kAddSource, 90);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(again->from_cache);
  EXPECT_EQ(again->cubin, p->cubin);
  const NvrtcStats after = GetNvrtcStats();
  EXPECT_EQ(after.compiles - before.compiles, 1u);
  EXPECT_EQ(after.hits - before.hits, 1u);

  NvrtcOptions no_cache;
  no_cache.use_cache = false;
  auto fresh = CompileCuda("add", kAddSource, 90, no_cache);
  ASSERT_TRUE(fresh.ok());
  EXPECT_FALSE(fresh->from_cache);
  EXPECT_EQ(GetNvrtcStats().compiles - before.compiles, 2u);
}

TEST(Nvrtc, KeyCoversSourceFlagsHeadersAndArchitecture) {
  CacheDir cache;
  NvrtcOptions o;
  o.flags = {"-DSCALE=2"};
  o.headers = {{"kiln/scale.h", "#define FACTOR SCALE\n"}};
  const std::string src = std::string("#include \"kiln/scale.h\"\n") + kAddSource +
                          "extern \"C\" __global__ void scale(float* x) { x[threadIdx.x] *= FACTOR; }\n";
  auto base = CompileCuda("k", src, 90, o);
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  NvrtcOptions flag = o;
  flag.flags = {"-DSCALE=3"};
  NvrtcOptions header = o;
  header.headers[0].source = "#define FACTOR (SCALE + 1)\n";
  auto f = CompileCuda("k", src, 90, flag);
  auto h = CompileCuda("k", src, 90, header);
  auto s = CompileCuda("k", src + "\n", 90, o);
  ASSERT_TRUE(f.ok() && h.ok() && s.ok());
  EXPECT_NE(f->key, base->key);
  EXPECT_NE(h->key, base->key);
  EXPECT_NE(s->key, base->key);
  EXPECT_FALSE(f->from_cache);
  EXPECT_FALSE(h->from_cache);
  const std::vector<int> archs = NvrtcArchitectures();
  int other = 0;
  for (int a : archs) {
    if (a != 90 && a >= 75) other = a;
  }
  if (other) {
    auto a = CompileCuda("k", src, other, o);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    EXPECT_NE(a->key, base->key);
    EXPECT_NE(a->cubin, base->cubin);
  }
}

TEST(Nvrtc, CompileErrorNamesTheProgramAndCarriesTheLog) {
  CacheDir cache;
  const std::string bad = "extern \"C\" __global__ void k(float* x) {\n  x[0] = undeclared_name;\n}\n";
  auto p = CompileCuda("broken_kernel", bad, 90);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  const std::string m = p.status().message();
  EXPECT_NE(m.find("broken_kernel"), std::string::npos) << m;
  EXPECT_NE(m.find("undeclared_name"), std::string::npos) << m;
  EXPECT_NE(m.find("(2)"), std::string::npos) << m;  // NVRTC's "file(line)"
  // A failure is not cached: the corrected program compiles.
  auto fixed = CompileCuda("broken_kernel", "extern \"C\" __global__ void k(float* x) { x[0] = 1; }\n", 90);
  EXPECT_TRUE(fixed.ok()) << fixed.status().ToString();
}

TEST(Nvrtc, RejectsFlagsHeadersAndArchitecturesItCannotTake) {
  for (const char* flag : {"-I/tmp", "--include-path=/tmp", "-arch=sm_80", "--gpu-architecture=sm_80", "-D",
                           "-DX Y", "--dopt=on", "-o"}) {
    NvrtcOptions o;
    o.flags = {flag};
    auto p = CompileCuda("k", kAddSource, 90, o);
    ASSERT_FALSE(p.ok()) << flag;
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument) << flag;
    EXPECT_NE(p.status().message().find(flag), std::string::npos) << p.status().message();
  }
  for (const char* name : {"../x.h", "/etc/passwd", "a b.h", ""}) {
    NvrtcOptions o;
    o.headers = {{name, "\n"}};
    auto p = CompileCuda("k", kAddSource, 90, o);
    ASSERT_FALSE(p.ok()) << name;
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  }
  auto p = CompileCuda("k", kAddSource, 12);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("sm_12"), std::string::npos) << p.status().message();
  EXPECT_NE(p.status().message().find("90"), std::string::npos) << p.status().message();  // the list
}

TEST(Nvrtc, DamagedOrForeignCacheEntryIsCompiledAgain) {
  CacheDir cache;
  auto p = CompileCuda("add", kAddSource, 90);
  ASSERT_TRUE(p.ok());
  const std::string entry = cache.path() + "/" + p->key + ".rtc";
  {
    std::fstream f(entry, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x55');  // inside the CUBIN: the checksum no longer matches
  }
  NvrtcStats before = GetNvrtcStats();
  auto again = CompileCuda("add", kAddSource, 90);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->from_cache);
  EXPECT_EQ(again->cubin, p->cubin);
  EXPECT_EQ(GetNvrtcStats().corrupt_entries - before.corrupt_entries, 1u);
  // Rewritten: the next one is a hit.
  EXPECT_TRUE(CompileCuda("add", kAddSource, 90)->from_cache);
  // Group-writable: not trusted.
  ASSERT_EQ(::chmod(entry.c_str(), 0664), 0);
  before = GetNvrtcStats();
  auto third = CompileCuda("add", kAddSource, 90);
  ASSERT_TRUE(third.ok());
  EXPECT_FALSE(third->from_cache);
  EXPECT_EQ(GetNvrtcStats().corrupt_entries - before.corrupt_entries, 1u);
}

// The device programs compile for sm_90 here (a syntax or type error in a
// kernel fails CI, not only a GPU run), bypassing the disk cache.
TEST(CudaKernels, ProgramsCompileForSm90WithoutAGpu) {
  CacheDir cache;
  NvrtcOptions o;
  o.headers = KernelProgramHeaders();
  o.use_cache = false;
  auto p = CompileCuda("kiln_elementwise", ElementwiseProgramSource(), 90, o);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_GT(p->cubin.size(), 1000u);
  EXPECT_EQ(p->log.find("warning"), std::string::npos) << p->log;
  // The entry points the kernels look up are in it.
  const std::string bin(p->cubin.begin(), p->cubin.end());
  for (const char* sym : {"kiln_unary", "kiln_binary", "kiln_copy", "kiln_gemm_pointers", "kiln_gemm_bias",
                          "kiln_softmax", "kiln_layernorm", "kiln_transpose", "kiln_where", "kiln_compare_kernel",
                          "kiln_gather", "kiln_conv_bias", "kiln_pool"}) {
    EXPECT_NE(bin.find(sym), std::string::npos) << sym;
  }
}

// What placement asks the device (no GPU needed): the op, types,
// attributes and static shapes decide.
TEST(CudaKernels, NodeSupportLooksAtTypesAttributesAndShapes) {
  ir::Graph g;
  auto* a = g.AddValue("a", DType::kFloat32, {2, 3});
  auto* b = g.AddValue("b", DType::kFloat32, {3});
  auto* y = g.AddValue("y", DType::kFloat32, {2, 3});
  auto dtypes = [](const ir::Node* n) {
    std::vector<DType> d;
    for (const ir::Value* v : n->inputs()) d.push_back(v ? v->dtype() : DType::kUndefined);
    return d;
  };
  ir::Node* add = g.AddNode("Add", "add", {a, b}, {y});
  EXPECT_TRUE(CudaNodeSupported(*add, dtypes(add)));
  auto* ia = g.AddValue("ia", DType::kInt64, {2, 3});
  auto* iy = g.AddValue("iy", DType::kInt64, {2, 3});
  ir::Node* iadd = g.AddNode("Add", "iadd", {ia, ia}, {iy});
  EXPECT_FALSE(CudaNodeSupported(*iadd, dtypes(iadd)));  // float32 only
  auto* bad = g.AddValue("bad", DType::kFloat32, {2});
  ir::Node* nobcast = g.AddNode("Add", "nobcast", {a, bad}, {y});
  EXPECT_FALSE(CudaNodeSupported(*nobcast, dtypes(nobcast)));
  auto* dyn = g.AddValue("dyn", DType::kFloat32, {-1, 3});
  ir::Node* relu = g.AddNode("Relu", "relu", {dyn}, {g.AddValue("r", DType::kFloat32, {-1, 3})});
  EXPECT_FALSE(CudaNodeSupported(*relu, dtypes(relu)));  // symbolic: not on cuda yet
  auto* s = g.AddValue("s", DType::kFloat32, {3});
  auto* m = g.AddValue("m", DType::kFloat32, {2, 1});
  auto* v = g.AddValue("v", DType::kFloat32, {2, 1});
  ir::Node* ln = g.AddNode("LayerNormalization", "ln", {a, s}, {y, m, v});
  EXPECT_FALSE(CudaNodeSupported(*ln, dtypes(ln)));  // Mean / InvStdDev wanted
  ir::Node* ln1 = g.AddNode("LayerNormalization", "ln1", {a, s}, {y});
  EXPECT_TRUE(CudaNodeSupported(*ln1, dtypes(ln1)));
  auto* w = g.AddValue("w", DType::kFloat32, {3, 4});
  ir::Node* mm = g.AddNode("MatMul", "mm", {a, w}, {g.AddValue("o", DType::kFloat32, {2, 4})});
  EXPECT_TRUE(CudaNodeSupported(*mm, dtypes(mm)));
  ir::Node* cast = g.AddNode("Cast", "cast", {a}, {g.AddValue("c", DType::kInt64, {2, 3})});
  cast->SetAttr("to", ir::Attribute::Int(static_cast<std::int64_t>(DType::kInt64)));
  EXPECT_TRUE(CudaNodeSupported(*cast, dtypes(cast)));
  ir::Node* to_half = g.AddNode("Cast", "to_half", {a}, {g.AddValue("h", DType::kFloat16, {2, 3})});
  to_half->SetAttr("to", ir::Attribute::Int(static_cast<std::int64_t>(DType::kFloat16)));
  EXPECT_FALSE(CudaNodeSupported(*to_half, dtypes(to_half)));  // no half kernels: the CPU takes it
  auto* x4 = g.AddValue("x4", DType::kFloat32, {1, 3, 8, 8});
  auto* w4 = g.AddValue("w4", DType::kFloat32, {4, 3, 3, 3});
  ir::Node* conv = g.AddNode("Conv", "conv", {x4, w4}, {g.AddValue("y4", DType::kFloat32, {1, 4, 6, 6})});
  EXPECT_TRUE(CudaNodeSupported(*conv, dtypes(conv)));
  ir::Node* asym = g.AddNode("Conv", "asym", {x4, w4}, {g.AddValue("y5", DType::kFloat32, {1, 4, 7, 7})});
  asym->SetAttr("pads", ir::Attribute::Ints({0, 0, 1, 1}));
  EXPECT_FALSE(CudaNodeSupported(*asym, dtypes(asym)));  // cuDNN pads symmetrically: the CPU takes it
  ir::Node* fused = g.AddNode("Add", "fused", {a, b}, {y});
  fused->SetAttr("kiln.activation", ir::Attribute::String("Relu"));
  EXPECT_FALSE(CudaNodeSupported(*fused, dtypes(fused)));
}

// ---- the device (needs a GPU) ----

std::unique_ptr<device::Device> OpenOrSkip(std::string* why) {
  auto d = CreateCudaDevice("cuda", "");
  if (!d.ok()) {
    *why = d.status().message();
    return nullptr;
  }
  return std::move(d).value();
}

#define KILN_CUDA_DEVICE_OR_SKIP(dev)                         \
  std::string skip_reason;                                    \
  auto dev = OpenOrSkip(&skip_reason);                        \
  if (!dev) GTEST_SKIP() << "no usable GPU: " << skip_reason

TEST(CudaDevice, OpeningWithoutAGpuGivesTheDriversReason) {
  std::string why;
  auto dev = OpenOrSkip(&why);
  if (!dev) {  // (with a GPU, only the refusal of a bad ordinal below applies)
    EXPECT_NE(why.find("device 'cuda' is unavailable"), std::string::npos) << why;
    EXPECT_NE(why.find("cudaError"), std::string::npos) << why;  // CUDA's own error name
  }
  auto bad = CreateCudaDevice("cuda:x", "x");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("not a device ordinal"), std::string::npos);
}

TEST(CudaDevice, CapabilitiesAndOrdinal) {
  KILN_CUDA_DEVICE_OR_SKIP(dev);
  EXPECT_EQ(dev->caps().kind, "cuda");
  EXPECT_FALSE(dev->caps().host_addressable);
  EXPECT_TRUE(dev->caps().pinned_host_memory);
  EXPECT_GE(CudaArch(*dev), 50);
  auto none = CreateCudaDevice("cuda:999", "999");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no CUDA device 999"), std::string::npos) << none.status().message();
}

TEST(CudaDevice, CopiesInEveryDirection) {
  KILN_CUDA_DEVICE_OR_SKIP(dev);
  const std::size_t n = (1 << 20) + 7;
  std::vector<float> host(n), back(n, -1.f);
  for (std::size_t i = 0; i < n; ++i) host[i] = static_cast<float>(i % 1000) * 0.5f;
  auto a = dev->Allocate(n * 4);
  auto b = dev->Allocate(n * 4);
  auto pinned = dev->Allocate(n * 4, device::MemoryKind::kPinnedHost);
  ASSERT_TRUE(a.ok() && b.ok() && pinned.ok());
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(*a) % dev->caps().alignment, 0u);
  auto s = dev->CreateStream();
  ASSERT_TRUE(s.ok());
  device::Stream& st = **s;
  // From pinned memory, overwritten at once: the copy must have taken the
  // bytes already (the interface's contract).
  std::memcpy(*pinned, host.data(), n * 4);
  ASSERT_TRUE(st.Copy(*a, *pinned, n * 4, device::CopyKind::kHostToDevice).ok());
  std::memset(*pinned, 0, n * 4);
  ASSERT_TRUE(st.Copy(*b, *a, n * 4, device::CopyKind::kDeviceToDevice).ok());
  ASSERT_TRUE(st.Copy(back.data(), *b, n * 4, device::CopyKind::kDeviceToHost).ok());
  ASSERT_TRUE(st.Synchronize().ok());
  EXPECT_EQ(back, host);
  // Pageable source, pinned destination, host to host in stream order.
  std::vector<float> twice(n);
  for (std::size_t i = 0; i < n; ++i) twice[i] = host[i] * 2;
  ASSERT_TRUE(st.Copy(*a, twice.data(), n * 4, device::CopyKind::kHostToDevice).ok());
  twice.assign(n, 0.f);
  ASSERT_TRUE(st.Copy(*pinned, *a, n * 4, device::CopyKind::kDeviceToHost).ok());
  ASSERT_TRUE(st.Synchronize().ok());  // a copy takes its source's bytes when called
  ASSERT_TRUE(st.Copy(back.data(), *pinned, n * 4, device::CopyKind::kHostToHost).ok());
  ASSERT_TRUE(st.Synchronize().ok());
  for (std::size_t i = 0; i < n; i += 997) ASSERT_EQ(back[i], host[i] * 2) << i;
  dev->Free(*a);
  dev->Free(*b);
  dev->Free(*pinned);
  auto huge = dev->Allocate(std::size_t{1} << 50);
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("cannot allocate"), std::string::npos);
}

struct AddLaunch {
  const void* kernel;
  long n;
  static Status Run(void* obj, const void* args, const device::ExecContext& ctx) {
    auto* self = static_cast<AddLaunch*>(obj);
    void* ptrs = const_cast<void*>(args);
    void* params[] = {&ptrs, &self->n};
    auto s = static_cast<cudaStream_t>(CudaStreamHandle(*ctx.stream));
    const cudaError_t e = cudaLaunchKernel(self->kernel, dim3(static_cast<unsigned>((self->n + 255) / 256)), dim3(256),
                                           params, 0, s);
    if (e != cudaSuccess) return Error(StatusCode::kInternal, "cudaLaunchKernel: ", cudaGetErrorString(e));
    return Status::Ok();
  }
};

// An NVRTC kernel reading its tensor addresses from an argument block in
// device memory, recorded once into a CUDA graph and replayed; rewriting
// the block (one host->device copy) rebinds the replay to other buffers.
TEST(CudaDevice, NvrtcKernelInACapturedGraphFollowsItsArgumentBlock) {
  KILN_CUDA_DEVICE_OR_SKIP(dev);
  CacheDir cache;
  auto prog = CompileCuda("add", kAddSource, CudaArch(*dev));
  ASSERT_TRUE(prog.ok()) << prog.status().ToString();
  auto mod = CudaModule::Load(prog->cubin, "add");
  ASSERT_TRUE(mod.ok()) << mod.status().ToString();
  auto kernel = (*mod)->Kernel("add");
  ASSERT_TRUE(kernel.ok()) << kernel.status().ToString();
  EXPECT_FALSE((*mod)->Kernel("nope").ok());

  const long n = 3000;
  std::vector<float> x(n), y(n), z(n);
  for (long i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i);
    y[i] = static_cast<float>(2 * i + 1);
    z[i] = static_cast<float>(-i);
  }
  void* buf[4];
  for (void*& p : buf) p = *dev->Allocate(n * 4);
  auto block = dev->Allocate(3 * sizeof(void*));
  ASSERT_TRUE(block.ok());
  auto s = dev->CreateStream();
  device::Stream& st = **s;
  ASSERT_TRUE(st.Copy(buf[0], x.data(), n * 4, device::CopyKind::kHostToDevice).ok());
  ASSERT_TRUE(st.Copy(buf[1], y.data(), n * 4, device::CopyKind::kHostToDevice).ok());
  ASSERT_TRUE(st.Copy(buf[2], z.data(), n * 4, device::CopyKind::kHostToDevice).ok());
  void* ptrs[3] = {buf[0], buf[1], buf[3]};  // x + y -> buf[3]
  ASSERT_TRUE(st.Copy(*block, ptrs, sizeof ptrs, device::CopyKind::kHostToDevice).ok());

  AddLaunch launch{*kernel, n};
  device::ExecContext ctx{dev.get(), &st, 1};
  ASSERT_TRUE(st.BeginCapture().ok());
  Status rec = st.Launch(&AddLaunch::Run, &launch, *block, ctx);
  auto graph = st.EndCapture();
  ASSERT_TRUE(rec.ok()) << rec.ToString();
  ASSERT_TRUE(graph.ok()) << graph.status().ToString();
  EXPECT_EQ((*graph)->size(), 1u);

  std::vector<float> out(n);
  ASSERT_TRUE(st.Replay(**graph, ctx).ok());
  ASSERT_TRUE(st.Copy(out.data(), buf[3], n * 4, device::CopyKind::kDeviceToHost).ok());
  ASSERT_TRUE(st.Synchronize().ok());
  for (long i = 0; i < n; ++i) ASSERT_EQ(out[i], static_cast<float>(3 * i + 1)) << i;

  // Refresh: y + z -> buf[0], by rewriting the block only.
  void* moved[3] = {buf[1], buf[2], buf[0]};
  ASSERT_TRUE(st.Copy(*block, moved, sizeof moved, device::CopyKind::kHostToDevice).ok());
  ASSERT_TRUE(st.Replay(**graph, ctx).ok());
  ASSERT_TRUE(st.Copy(out.data(), buf[0], n * 4, device::CopyKind::kDeviceToHost).ok());
  ASSERT_TRUE(st.Synchronize().ok());
  for (long i = 0; i < n; ++i) ASSERT_EQ(out[i], static_cast<float>(i + 1)) << i;
  for (void* p : buf) dev->Free(p);
  dev->Free(*block);
}

std::atomic<int> g_host_calls{0};
Status CountAndCheck(void* obj, const void*, const device::ExecContext& ctx) {
  // Runs after the copy before it in the graph: the pinned value is there.
  const float* pinned = static_cast<const float*>(obj);
  if (ctx.threads != 3) return Error(StatusCode::kInternal, "host node saw threads ", ctx.threads);
  if (pinned[0] != 42.f) return Error(StatusCode::kInternal, "host node ran before the copy: ", pinned[0]);
  ++g_host_calls;
  return Status::Ok();
}
Status Fails(void*, const void*, const device::ExecContext&) { return Error(StatusCode::kInternal, "planned failure"); }

TEST(CudaDevice, HostNodesRunInOrderWithTheReplaysContextAndReportErrors) {
  KILN_CUDA_DEVICE_OR_SKIP(dev);
  auto s = dev->CreateStream();
  device::Stream& st = **s;
  auto pinned = dev->Allocate(64, device::MemoryKind::kPinnedHost);
  std::memset(*pinned, 0, 64);
  device::ExecContext rec_ctx{dev.get(), &st, 1};
  ASSERT_TRUE(st.BeginCapture().ok());
  ASSERT_TRUE(st.LaunchHost(&CountAndCheck, *pinned, nullptr, rec_ctx).ok());
  auto graph = st.EndCapture();
  ASSERT_TRUE(graph.ok()) << graph.status().ToString();
  const float v = 42.f;
  ASSERT_TRUE(st.Copy(*pinned, &v, 4, device::CopyKind::kHostToHost).ok());
  device::ExecContext run_ctx{dev.get(), &st, 3};
  ASSERT_TRUE(st.Replay(**graph, run_ctx).ok());
  ASSERT_TRUE(st.Replay(**graph, run_ctx).ok());
  ASSERT_TRUE(st.Synchronize().ok());
  EXPECT_EQ(g_host_calls.load(), 2);

  // A failing host call: reported at Synchronize; what follows is skipped.
  ASSERT_TRUE(st.LaunchHost(&Fails, nullptr, nullptr, run_ctx).ok());
  ASSERT_TRUE(st.Replay(**graph, run_ctx).ok());
  Status sync = st.Synchronize();
  EXPECT_FALSE(sync.ok());
  EXPECT_NE(sync.message().find("planned failure"), std::string::npos) << sync.ToString();
  EXPECT_EQ(g_host_calls.load(), 2);
  // The next Synchronize is clean again.
  ASSERT_TRUE(st.Replay(**graph, run_ctx).ok());
  EXPECT_TRUE(st.Synchronize().ok());
  EXPECT_EQ(g_host_calls.load(), 3);
  dev->Free(*pinned);
}

TEST(CudaDevice, EventsOrderTwoStreams) {
  KILN_CUDA_DEVICE_OR_SKIP(dev);
  auto s1 = dev->CreateStream();
  auto s2 = dev->CreateStream();
  const std::size_t n = 1 << 22;
  std::vector<std::uint8_t> src(n, 7), dst(n, 0);
  void* d = *dev->Allocate(n);
  Event e;
  ASSERT_TRUE((*s1)->Copy(d, src.data(), n, device::CopyKind::kHostToDevice).ok());
  ASSERT_TRUE((*s1)->RecordEvent(e).ok());
  ASSERT_TRUE((*s2)->WaitEvent(e).ok());
  ASSERT_TRUE((*s2)->Copy(dst.data(), d, n, device::CopyKind::kDeviceToHost).ok());
  ASSERT_TRUE((*s2)->Synchronize().ok());
  EXPECT_TRUE(e.Query());
  EXPECT_EQ(dst, src);
  ASSERT_TRUE((*s1)->Synchronize().ok());
  dev->Free(d);
}

}  // namespace
}  // namespace kiln::cuda
