// Winograd F(4x4, 3x3) against oneDNN's direct convolution, per layer shape
// (NHWC float32, 3x3, stride 1, pad 1): median ms of each, interleaved, and
// the largest difference between them relative to the output's largest
// magnitude. Usage: winograd_bench [--threads N] [--runs N] [N,C,H,W,K ...]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <dnnl.hpp>

#include "backends/cpu/kernel.h"
#include "backends/cpu/kernels/winograd.h"

namespace {
double Ms(std::chrono::steady_clock::time_point a) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count();
}
double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
  int threads = 1, runs = 20;
  std::vector<std::string> shapes;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (a == "--runs" && i + 1 < argc) runs = std::atoi(argv[++i]);
    else shapes.push_back(a);
  }
  if (shapes.empty()) shapes = {"1,64,56,56,64", "1,128,28,28,128", "1,256,14,14,256", "1,512,7,7,512"};
  kiln::cpu::UseThreads(threads);
  if (!kiln::cpu::WinogradAvailable()) {
    std::printf("no AVX2+FMA: nothing to measure\n");
    return 0;
  }
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  std::printf("%-20s %10s %10s %8s %10s\n", "N,C,H,W,K", "onednn_ms", "wino_ms", "ratio", "max_rel");
  for (const std::string& sh : shapes) {
    long n, c, h, w, k;
    if (std::sscanf(sh.c_str(), "%ld,%ld,%ld,%ld,%ld", &n, &c, &h, &w, &k) != 5) return 1;
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    std::vector<float> x(n * h * w * c), wt(k * c * 9), bias(k), y0(n * h * w * k), y1(n * h * w * k);
    for (float& v : x) v = dist(rng);
    for (float& v : wt) v = dist(rng) / std::sqrt(9.f * c);
    for (float& v : bias) v = dist(rng);
    using tag = dnnl::memory::format_tag;
    using dt = dnnl::memory::data_type;
    dnnl::memory::desc src({n, c, h, w}, dt::f32, tag::nhwc), dst({n, k, h, w}, dt::f32, tag::nhwc);
    dnnl::memory::desc wany({k, c, 3, 3}, dt::f32, tag::any), wplain({k, c, 3, 3}, dt::f32, tag::oihw);
    dnnl::memory::desc bd({k}, dt::f32, tag::x);
    dnnl::post_ops po;
    po.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
    dnnl::primitive_attr attr;
    attr.set_post_ops(po);
    dnnl::convolution_forward::desc cd(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src,
                                       wany, bd, dst, {1, 1}, {1, 1}, {1, 1});
    dnnl::convolution_forward::primitive_desc pd(cd, attr, eng);
    dnnl::memory xm(src, eng, x.data()), ym(dst, eng, y0.data()), bm(bd, eng, bias.data());
    dnnl::memory wp(wplain, eng, wt.data()), wm(pd.weights_desc(), eng);
    dnnl::reorder(wp, wm).execute(strm, wp, wm);
    dnnl::convolution_forward conv(pd);
    std::vector<float> u(kiln::cpu::WinogradPackedFloats(k, c) + 8);
    float* ua = reinterpret_cast<float*>((reinterpret_cast<std::uintptr_t>(u.data()) + 31) & ~std::uintptr_t{31});
    kiln::cpu::WinogradPackWeights(wt.data(), k, c, ua);
    kiln::cpu::WinogradShape s{n, h, w, c, k, h, w, 1, 1};
    kiln::cpu::WinogradEpilogue e;
    e.bias = bias.data();
    e.act = kiln::cpu::WinogradAct::kRelu;
    std::vector<double> t0, t1;
    for (int r = 0; r < runs + 3; ++r) {
      auto a = std::chrono::steady_clock::now();
      conv.execute(strm, {{DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_BIAS, bm}, {DNNL_ARG_DST, ym}});
      strm.wait();
      const double d0 = Ms(a);
      a = std::chrono::steady_clock::now();
      kiln::cpu::WinogradConvNhwc(s, x.data(), ua, y1.data(), e);
      const double d1 = Ms(a);
      if (r >= 3) t0.push_back(d0), t1.push_back(d1);
    }
    double mx = 0, md = 0;
    for (std::size_t i = 0; i < y0.size(); ++i) mx = std::max(mx, double(std::fabs(y0[i]))), md = std::max(md, double(std::fabs(y0[i] - y1[i])));
    std::printf("%-20s %10.3f %10.3f %8.3f %10.2e  (%s)\n", sh.c_str(), Median(t0), Median(t1), Median(t1) / Median(t0),
                md / mx, pd.impl_info_str());
  }
  return 0;
}
