// ConvTranspose: output geometry (strides, pads, dilations, output_padding,
// output_shape, auto_pad), groups, bias, constant and runtime weights, 1-D to
// 3-D, with hand-derived results, and error messages.
#include <gtest/gtest.h>

#include "node_runner.h"

namespace kiln {
namespace {

using test::F32T;
using test::Int;
using test::Ints;
using test::NodeRunner;
using test::Values;

void ExpectFloats(const Result<std::vector<HostTensorPtr>>& r, const std::vector<float>& want) {
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const std::vector<float> got = Values<float>(r.value()[0]);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << "element " << i;
}

void ExpectInferError(NodeRunner& r, const std::string& what) {
  Status st = r.Infer();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("node 'node'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(what), std::string::npos) << st.message();
}

// x = [1, 2, 3] as [1, 1, 3]; w as [1, 1, k].
NodeRunner Conv1D(std::vector<float> w) {
  const auto k = static_cast<std::int64_t>(w.size());
  return NodeRunner("ConvTranspose", 11, {F32T({1, 1, 3}, {1, 2, 3}), F32T({1, 1, k}, std::move(w))});
}

TEST(ConvTranspose, Strides1D) {
  // Each input element adds x_i * w at position i * stride.
  NodeRunner s1 = Conv1D({1, 1});
  ExpectFloats(s1.Run(), {1, 3, 5, 3});
  NodeRunner s2 = Conv1D({1, 1});
  s2.Attr("strides", Ints({2}));
  ExpectFloats(s2.Run(), {1, 1, 2, 2, 3, 3});
  EXPECT_EQ(s2.out_shape(), (Shape{1, 1, 6}));
}

TEST(ConvTranspose, PadsCropTheFullOutput) {
  // Full output [1, 3, 6, 5, 3]; pads [1, 1] drop one element at each end.
  NodeRunner r = Conv1D({1, 1, 1});
  r.Attr("pads", Ints({1, 1}));
  ExpectFloats(r.Run(), {3, 6, 5});
}

TEST(ConvTranspose, OutputPaddingAndOutputShapeExtendTheEnd) {
  NodeRunner op = Conv1D({1, 1});
  op.Attr("strides", Ints({2})).Attr("output_padding", Ints({1}));
  ExpectFloats(op.Run(), {1, 1, 2, 2, 3, 3, 0});
  NodeRunner os = Conv1D({1, 1});
  os.Attr("strides", Ints({2})).Attr("output_shape", Ints({7}));
  ExpectFloats(os.Run(), {1, 1, 2, 2, 3, 3, 0});
  NodeRunner shorter = Conv1D({1, 1});  // total padding 1: NOTSET puts it at the start
  shorter.Attr("strides", Ints({2})).Attr("output_shape", Ints({5}));
  ExpectFloats(shorter.Run(), {1, 2, 2, 3, 3});
}

TEST(ConvTranspose, AutoPadSame) {
  // Full output [1, 1, 3, 2, 5, 3, 3] (k = 3, stride 2); SAME keeps 3 * 2 = 6.
  NodeRunner up = Conv1D({1, 1, 1});
  up.Attr("strides", Ints({2})).Attr("auto_pad", ir::Attribute::String("SAME_UPPER"));
  ExpectFloats(up.Run(), {1, 1, 3, 2, 5, 3});
  NodeRunner lo = Conv1D({1, 1, 1});
  lo.Attr("strides", Ints({2})).Attr("auto_pad", ir::Attribute::String("SAME_LOWER"));
  ExpectFloats(lo.Run(), {1, 3, 2, 5, 3, 3});
}

TEST(ConvTranspose, Dilations) {
  // Kernel [1, 1] dilated by 2 spans 3: x0 at 0 and 2, x1 at 1 and 3.
  NodeRunner r("ConvTranspose", 11, {F32T({1, 1, 2}, {1, 2}), F32T({1, 1, 2}, {1, 1})});
  r.Attr("dilations", Ints({2}));
  ExpectFloats(r.Run(), {1, 2, 1, 2});
}

TEST(ConvTranspose, TwoDimensionalWithBiasAndTwoOutputChannels) {
  // 1x1 kernel, stride 2: inputs land on even positions; channel 1 = 10x - 1.
  NodeRunner r("ConvTranspose", 1, {F32T({1, 1, 2, 2}, {1, 2, 3, 4}), F32T({1, 2, 1, 1}, {1, 10}), F32T({2}, {0.5f, -1})});
  r.Attr("strides", Ints({2, 2}));
  ExpectFloats(r.Run(), {1.5f, 0.5f, 2.5f, 0.5f, 0.5f, 0.5f, 3.5f, 0.5f, 4.5f,  //
                         9, -1, 19, -1, -1, -1, 29, -1, 39});
  EXPECT_EQ(r.out_shape(), (Shape{1, 2, 3, 3}));
}

TEST(ConvTranspose, GroupsAndRuntimeWeights) {
  // Two groups of one channel: y0 = 3 * x0, y1 = 5 * x1.
  NodeRunner g("ConvTranspose", 11, {F32T({1, 2, 1}, {1, 2}), {DType::kFloat32, {2, 1, 1}}});
  g.Attr("group", Int(2));
  ExpectFloats(g.Run({F32T({2, 1, 1}, {3, 5})}), {3, 10});
  // Constant weights, group 2 with two input channels per group: W [4, 1, 1].
  NodeRunner c("ConvTranspose", 11, {F32T({1, 4, 1}, {1, 2, 3, 4}), F32T({4, 1, 1}, {1, 10, 100, 1000})});
  c.Attr("group", Int(2));
  ExpectFloats(c.Run(), {21, 4300});
}

TEST(ConvTranspose, ThreeDimensional) {
  NodeRunner r("ConvTranspose", 11, {F32T({1, 1, 1, 1, 1}, {2}), F32T({1, 1, 2, 2, 2}, std::vector<float>(8, 1))});
  ExpectFloats(r.Run(), std::vector<float>(8, 2));
  EXPECT_EQ(r.out_shape(), (Shape{1, 1, 2, 2, 2}));
}

// Channels-last (kiln.nhwc) with kernel == stride: the per-kernel-row matmul
// route. Batch 2, a 2x1 kernel at strides 2x1, bias, 5 -> 3 channels, against
// y[n, kh*i+u, kw*j+t, o] = b[o] + sum_c x[n, i, j, c] * w[c, o, u, t]; and
// with output_padding (no longer a pure patch: oneDNN's deconvolution) the
// same values plus the bias-only last row.
TEST(ConvTranspose, ChannelsLastKernelEqualsStride) {
  const std::int64_t n = 2, h = 3, wd = 4, cin = 5, cout = 3, kh = 2, kw = 1;
  std::vector<float> x(static_cast<std::size_t>(n * h * wd * cin)), w(static_cast<std::size_t>(cin * cout * kh * kw));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((static_cast<int>(i) * 7 % 11) - 5) * 0.5f;
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>((static_cast<int>(i) * 5 % 13) - 6) * 0.25f;
  const std::vector<float> b = {0.5f, -1.f, 2.f};
  for (int extra : {0, 1}) {
    const std::int64_t oh = h * kh + extra, ow = wd * kw;
    std::vector<float> want(static_cast<std::size_t>(n * oh * ow * cout));
    for (std::int64_t a = 0; a < n; ++a)
      for (std::int64_t r = 0; r < oh; ++r)
        for (std::int64_t q = 0; q < ow; ++q)
          for (std::int64_t o = 0; o < cout; ++o) {
            double s = b[o];
            const std::int64_t i = r / kh, u = r % kh, j = q / kw, t = q % kw;
            if (i < h) {
              for (std::int64_t c = 0; c < cin; ++c)
                s += double(x[((a * h + i) * wd + j) * cin + c]) * w[((c * cout + o) * kh + u) * kw + t];
            }
            want[((a * oh + r) * ow + q) * cout + o] = static_cast<float>(s);
          }
    NodeRunner r("ConvTranspose", 11, {F32T({n, h, wd, cin}, x), F32T({cin, cout, kh, kw}, w), F32T({cout}, b)});
    r.Attr("strides", Ints({kh, kw})).Attr("kiln.nhwc", Int(1));
    if (extra) r.Attr("output_padding", Ints({1, 0}));
    auto out = r.Run();
    EXPECT_EQ(r.out_shape(), (Shape{n, oh, ow, cout}));
    ExpectFloats(out, want);
  }
}

TEST(ConvTranspose, Errors) {
  NodeRunner group("ConvTranspose", 11, {F32T({1, 3, 1}, {1, 2, 3}), F32T({3, 1, 1}, {1, 1, 1})});
  group.Attr("group", Int(2));
  ExpectInferError(group, "'group' = 2");
  NodeRunner ks = Conv1D({1, 1});
  ks.Attr("kernel_shape", Ints({3}));
  ExpectInferError(ks, "'kernel_shape'");
  NodeRunner ap = Conv1D({1, 1});
  ap.Attr("auto_pad", ir::Attribute::String("SAME"));
  ExpectInferError(ap, "'auto_pad'");
  NodeRunner st = Conv1D({1, 1});
  st.Attr("strides", Ints({0}));
  ExpectInferError(st, "'strides'");
  NodeRunner os = Conv1D({1, 1});
  os.Attr("output_shape", Ints({4, 4}));
  ExpectInferError(os, "'output_shape'");
  NodeRunner ch("ConvTranspose", 11, {F32T({1, 2, 1}, {1, 2}), F32T({1, 1, 1}, {1})});
  ExpectInferError(ch, "input channels 2");
}

}  // namespace
}  // namespace kiln
