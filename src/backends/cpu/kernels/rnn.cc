// LSTM, GRU and RNN (float32). The input projection X·Wᵀ of every timestep
// and both directions is one oneDNN matmul; each step's recurrent product
// H·Rᵀ is another (GRU without linear_before_reset needs a second one,
// (r ⊙ H)·Rhᵀ, after the reset gate). The primitives are built at load;
// constant W and R are reordered once into oneDNN's preferred weights
// layout, runtime ones are read in place through a transposed view. Gates
// and state updates are plain loops.
//
// sequence_lens: a batch entry past its length writes zeros to Y and keeps
// its state; the reverse direction of an entry of length L runs L-1 .. 0.
//
// com.microsoft DynamicQuantizeLSTM is the same LSTM with ONNX Runtime's
// quantized products (its DeepCPU LSTM with 8-bit weights): X, over the
// rows of the first max(sequence_lens) steps, and each step's H, over the
// whole batch, are quantized as DynamicQuantizeLinear does (uint8, scale
// (max - min) / 255 of a range holding 0, ties to even); the products of
// (q - zp) and (w - w_zp) are summed exactly in int32 (QuantizedProduct,
// AVX2 vpmaddwd on weights kept 8-bit), then float(sum) * (a_scale *
// w_scale[column]). The gate input is
// (X·W + H·R) + (Wb + Rb) in that order, as there. A batch entry past its
// length counts as 0 in H's range when Y is an output (ONNX Runtime reads
// its zeroed Y row), else as its held state.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>

#include <immintrin.h>

#include "backends/cpu/dnnl_util.h"
#include "backends/cpu/kernels/quant.h"
#include "backends/cpu/kernels/util.h"
#include "backends/cpu/kernels/vec_math.h"
#include "common/checked.h"
#include "ops/op_registry.h"

namespace kiln::cpu {
namespace {

using dnnl::memory;

// ---------------------------------------------------------------------------
// Activations.

enum class Act { kSigmoid, kTanh, kRelu, kHardSigmoid, kLeakyRelu, kThresholdedRelu, kScaledTanh,
                 kAffine, kElu, kSoftsign, kSoftplus };

struct ActFn {
  Act kind = Act::kSigmoid;
  float alpha = 0.f, beta = 0.f;
};

// Parses one activation name, consuming alpha/beta values in order for the
// functions that take them (onnxruntime's convention); defaults otherwise.
Result<ActFn> ParseAct(const std::string& name, const std::vector<float>& alphas, std::size_t& ai,
                       const std::vector<float>& betas, std::size_t& bi) {
  std::string l = name;
  for (char& ch : l) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  struct Entry { const char* name; Act kind; bool a, b; float da, db; };
  static const Entry kTable[] = {
      {"sigmoid", Act::kSigmoid, false, false, 0, 0},
      {"tanh", Act::kTanh, false, false, 0, 0},
      {"relu", Act::kRelu, false, false, 0, 0},
      {"hardsigmoid", Act::kHardSigmoid, true, true, 0.2f, 0.5f},
      {"leakyrelu", Act::kLeakyRelu, true, false, 0.01f, 0},
      {"thresholdedrelu", Act::kThresholdedRelu, true, false, 1.f, 0},
      {"scaledtanh", Act::kScaledTanh, true, true, 1.f, 1.f},
      {"affine", Act::kAffine, true, true, 1.f, 0.f},
      {"elu", Act::kElu, true, false, 1.f, 0},
      {"softsign", Act::kSoftsign, false, false, 0, 0},
      {"softplus", Act::kSoftplus, false, false, 0, 0},
  };
  for (const Entry& e : kTable) {
    if (l != e.name) continue;
    ActFn f{e.kind, e.da, e.db};
    if (e.a && ai < alphas.size()) f.alpha = alphas[ai++];
    if (e.b && bi < betas.size()) f.beta = betas[bi++];
    return f;
  }
  return Error(StatusCode::kInvalidArgument, "attribute 'activations': unknown activation '", name, "'");
}

// p[i] = act(p[i]) for i < n.
void Apply(const ActFn& f, float* p, std::int64_t n) {
  const float a = f.alpha, b = f.beta;
  switch (f.kind) {
    case Act::kSigmoid:
      SigmoidF32(p, p, n);
      break;
    case Act::kTanh:
      TanhF32(p, p, n);
      break;
    case Act::kRelu:
      for (std::int64_t i = 0; i < n; ++i) p[i] = std::max(p[i], 0.f);
      break;
    case Act::kHardSigmoid:
      for (std::int64_t i = 0; i < n; ++i) p[i] = std::min(1.f, std::max(0.f, a * p[i] + b));
      break;
    case Act::kLeakyRelu:
      for (std::int64_t i = 0; i < n; ++i) p[i] = p[i] >= 0.f ? p[i] : a * p[i];
      break;
    case Act::kThresholdedRelu:
      for (std::int64_t i = 0; i < n; ++i) p[i] = p[i] > a ? p[i] : 0.f;
      break;
    case Act::kScaledTanh:
      for (std::int64_t i = 0; i < n; ++i) p[i] = a * std::tanh(b * p[i]);
      break;
    case Act::kAffine:
      for (std::int64_t i = 0; i < n; ++i) p[i] = a * p[i] + b;
      break;
    case Act::kElu:
      for (std::int64_t i = 0; i < n; ++i) p[i] = p[i] >= 0.f ? p[i] : a * (std::exp(p[i]) - 1.f);
      break;
    case Act::kSoftsign:
      for (std::int64_t i = 0; i < n; ++i) p[i] = p[i] / (1.f + std::fabs(p[i]));
      break;
    case Act::kSoftplus:
      for (std::int64_t i = 0; i < n; ++i) {
        const float x = p[i];
        p[i] = x > 20.f ? x : std::log1p(std::exp(x));
      }
      break;
  }
}

inline void Clip(float* p, std::int64_t n, float c) {
  for (std::int64_t i = 0; i < n; ++i) p[i] = std::min(c, std::max(-c, p[i]));
}

// ---------------------------------------------------------------------------
// C[M,N] = A[M,K] · Vᵀ, where V is an [N, K] row-major block of a weights
// tensor (W or R) at one of several element offsets (one per direction or
// gate group).

class TransposedMatMul {
 public:
  // `const_w`: the whole weights tensor when it is a constant (the blocks are
  // reordered into oneDNN's layout now), else null (read at run time).
  Status Init(const char* what, std::int64_t m, std::int64_t k, std::int64_t n, const float* const_w,
              std::vector<std::int64_t> offsets) {
    m_ = m;
    k_ = k;
    n_ = n;
    offsets_ = std::move(offsets);
    if (m == 0 || n == 0 || k == 0) return Status::Ok();  // Run fills zeros / nothing
    return DnnlCall(what, [&] {
      const memory::desc src_md = PlainDesc({m, k});
      const memory::desc dst_md = PlainDesc({m, n});
      const memory::desc user_w_md = StridedDesc({k, n}, {1, k});
      const memory::desc w_md = const_w
          ? memory::desc({k, n}, memory::data_type::f32, memory::format_tag::any)
          : user_w_md;
      dnnl::matmul::desc d(src_md, w_md, dst_md);
      dnnl::matmul::primitive_desc pd(d, UserScratchpad(), DnnlEngine());
      prim_ = dnnl::matmul(pd);
      scratch_ = ScratchpadFor(pd);
      const memory scratch = scratch_.mem;
      src_ = memory(pd.src_desc(), DnnlEngine(), nullptr);
      dst_ = memory(pd.dst_desc(), DnnlEngine(), nullptr);
      if (const_w) {
        for (std::int64_t off : offsets_) {
          memory user(user_w_md, DnnlEngine(), const_cast<float*>(const_w + off));
          memory packed(pd.weights_desc(), DnnlEngine());
          dnnl::reorder(user, packed).execute(DnnlStream(), user, packed);
          DnnlStream().wait();
          weights_.push_back(packed);
        }
      } else {
        weights_.push_back(memory(pd.weights_desc(), DnnlEngine(), nullptr));
        runtime_w_ = true;
      }
      for (const memory& w : weights_) {
        args_.push_back({{DNNL_ARG_SRC, src_}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, dst_}, {DNNL_ARG_SCRATCHPAD, scratch}});
      }
    });
  }

  // `w` is the weights tensor's address (used when it is not constant);
  // `block` picks the offset given at Init.
  void Run(const float* a, const float* w, int block, float* c, const device::ExecContext* ctx) {
    if (m_ == 0 || n_ == 0) return;
    if (k_ == 0) {
      std::memset(c, 0, static_cast<std::size_t>(m_ * n_) * sizeof(float));
      return;
    }
    src_.set_data_handle(const_cast<float*>(a));
    dst_.set_data_handle(c);
    scratch_.Bind(ctx);
    if (runtime_w_) {
      weights_[0].set_data_handle(const_cast<float*>(w + offsets_[block]));
      prim_.execute(DnnlStream(), args_[0]);
    } else {
      prim_.execute(DnnlStream(), args_[block]);
    }
    DnnlStream().wait();
  }

  std::size_t scratch_bytes() const { return scratch_.bytes; }

 private:
  std::int64_t m_ = 0, k_ = 0, n_ = 0;
  std::vector<std::int64_t> offsets_;
  dnnl::matmul prim_;
  memory src_, dst_;
  std::vector<memory> weights_;
  std::vector<std::unordered_map<int, memory>> args_;
  Scratchpad scratch_;
  bool runtime_w_ = false;
};

// ---------------------------------------------------------------------------
// DynamicQuantizeLSTM's products: C[M, N] = float(sum_k A[m, k] * (V[k, n] -
// zp)) * mult[n], where A holds uint8 values minus their zero point (int16,
// within [-255, 255]) and V is the k-major [K, N] block `block` of an 8-bit
// weights tensor [blocks, K, N]. The sums are exact int32 (as ONNX Runtime's
// u8 x s8 / u8 x u8 GEMM's, where its products are exact). The weights stay
// 8-bit in memory (int8 with zero point 0; int16 where w - zp leaves int8),
// packed as pairs of k per column for vpmaddwd: an LSTM's recurrent product
// at batch 1 is a matrix-vector product bound by reading them, so they take
// a quarter (or half) of float32's bytes.

class QuantizedProduct {
 public:
  Status Init(std::int64_t m, std::int64_t k, std::int64_t n, const HostTensor& w, const std::vector<std::int32_t>& zp) {
    m_ = m;
    k_ = k;
    n_ = n;
    kp_ = (k + 1) / 2 * 2;
    np_ = (n + kCols - 1) / kCols * kCols;  // k and n: dims of a weights tensor in memory
    const std::int64_t blocks = static_cast<std::int64_t>(zp.size());
    const bool u8 = w.dtype() == DType::kUInt8;
    // w - zp, once.
    std::vector<std::int16_t> v(static_cast<std::size_t>(blocks * k * n));
    wide_ = false;
    narrow_ = true;
    for (std::int64_t i = 0; i < blocks * k * n; ++i) {
      const int x = (u8 ? static_cast<int>(w.data_as<std::uint8_t>()[i]) : w.data_as<std::int8_t>()[i]) -
                    zp[static_cast<std::size_t>(i / (k * n))];
      v[static_cast<std::size_t>(i)] = static_cast<std::int16_t>(x);
      wide_ = wide_ || x < -128 || x > 127;
      narrow_ = narrow_ && x >= -64 && x <= 64;
    }
    static const bool avx2 = __builtin_cpu_supports("avx2");
    narrow_ = narrow_ && avx2;
    // Packed per block, column tile by column tile (each tile's weights
    // contiguous, read in order): [np / kCols][k / g][kCols][g], g values of
    // k per column together: 4 for vpmaddubsw (7-bit weights, whose pair
    // sums of uint8 x int8 cannot saturate: 2 * 255 * 64 < 2^15; A then
    // stays uint8 and zp times the column's weight sum is taken off after),
    // else 2 for vpmaddwd on int16 (A centred).
    group_ = narrow_ ? 4 : 2;
    kg_ = (k + group_ - 1) / group_;
    std::int64_t packed = 0, operand = 0;
    if (!CheckedMul(np_, kg_ * group_, &block_len_) || !CheckedMul(block_len_, blocks * 2, &packed) ||
        !CheckedMul(m, kg_ * group_ * 2, &operand) || packed > kMaxTensorBytes || operand > kMaxTensorBytes) {
      return Error(StatusCode::kOutOfRange, "DynamicQuantizeLSTM: packed weights or operand of ", m, " x ", k,
                   " x ", n, " pass ", kMaxTensorBytes, " bytes");
    }
    if (wide_) w16_.assign(static_cast<std::size_t>(blocks * block_len_), 0);
    else w8_.assign(static_cast<std::size_t>(blocks * block_len_), 0);
    if (narrow_) colsum_.assign(static_cast<std::size_t>(blocks * np_), 0);
    for (std::int64_t b = 0; b < blocks; ++b) {
      for (std::int64_t kk = 0; kk < k; ++kk) {
        for (std::int64_t nn = 0; nn < n; ++nn) {
          const int x = v[static_cast<std::size_t>((b * k + kk) * n + nn)];
          const std::size_t i = static_cast<std::size_t>(
              b * block_len_ + (((nn / kCols) * kg_ + kk / group_) * kCols + nn % kCols) * group_ + kk % group_);
          if (wide_) w16_[i] = static_cast<std::int16_t>(x);
          else w8_[i] = static_cast<std::int8_t>(x);
          if (narrow_) {  // wrapping, as above
            std::int32_t& cs = colsum_[static_cast<std::size_t>(b * np_ + nn)];
            cs = static_cast<std::int32_t>(static_cast<std::uint32_t>(cs) + static_cast<std::uint32_t>(x));
          }
        }
      }
    }
    if (narrow_) a8_.assign(static_cast<std::size_t>(m * kg_ * 4), 0);
    else a_.assign(static_cast<std::size_t>(m * kp_), 0);
    return Status::Ok();
  }

  // Quantizes rows [0, m) of x ([m, k] float32) with scale s and zero point
  // zp into A (DynamicQuantizeLinear's values minus zp).
  void Quantize(const float* x, float s, std::int32_t zp) {
    if (narrow_) {
      zp_ = zp;
      const std::int64_t ld = kg_ * 4;
      if (ld == k_) DynamicQuantizeU8(x, a8_.data(), m_ * k_, s, zp);
      else for (std::int64_t i = 0; i < m_; ++i) DynamicQuantizeU8(x + i * k_, a8_.data() + i * ld, k_, s, zp);
      return;
    }
    if (kp_ == k_) {
      QuantizeCenteredInt16(x, a_.data(), m_ * k_, s, zp);
      return;
    }
    for (std::int64_t i = 0; i < m_; ++i) QuantizeCenteredInt16(x + i * k_, a_.data() + i * kp_, k_, s, zp);
  }

  // C[M, N] (row stride ldc) = float(A · (V_block - zp)) * mult[n].
  void Run(int block, const float* mult, float* c, std::int64_t ldc) const {
    const std::int64_t col_blocks = np_ / kCols, row_blocks = (m_ + kRows - 1) / kRows;
    const std::int64_t tasks = col_blocks * row_blocks;
    // 256K multiply-adds a task at least: waking a thread costs about 15 us,
    // a few times a small step's whole product.
    const std::int64_t per_tile = std::min<std::int64_t>(m_, kRows) * kCols * kg_ * group_;
    const std::int64_t grain = std::max<std::int64_t>(1, (std::int64_t{1} << 18) / std::max<std::int64_t>(1, per_tile));
    ParallelFor(tasks, grain, [&](std::int64_t t0, std::int64_t t1) {
      for (std::int64_t t = t0; t < t1; ++t) {
        const std::int64_t rb = t / col_blocks, cb = t % col_blocks;
        const std::int64_t r0 = rb * kRows, rows = std::min<std::int64_t>(kRows, m_ - r0);
        Tile(block, r0, static_cast<int>(rows), cb * kCols, mult, c, ldc);
      }
    });
  }

 private:
  static constexpr std::int64_t kCols = 16, kRows = 4;

  void Tile(int block, std::int64_t r0, int rows, std::int64_t n0, const float* mult, float* c, std::int64_t ldc) const {
    std::int32_t acc[kRows][kCols];
    static const bool avx2 = __builtin_cpu_supports("avx2");
    // (Each route's buffers only: the others are empty.)
    if (narrow_) TileNarrowAvx2(a8_.data() + r0 * kg_ * 4, w8_.data() + block * block_len_, rows, n0, acc);
    else if (avx2 && wide_) TileAvx2(a_.data() + r0 * kp_, w16_.data() + block * block_len_, rows, n0, acc);
    else if (avx2) TileAvx2(a_.data() + r0 * kp_, w8_.data() + block * block_len_, rows, n0, acc);
    else TileScalar(a_.data() + r0 * kp_, block, rows, n0, acc);
    const std::int64_t cols = std::min<std::int64_t>(kCols, n_ - n0);
    const std::int32_t* cs = narrow_ ? colsum_.data() + block * np_ + n0 : nullptr;
    for (int r = 0; r < rows; ++r) {
      float* out = c + (r0 + r) * ldc + n0;
      // Wrapping int32 arithmetic, as the vector sums wrap (only a
      // reduction far past any real layer's could reach it).
      if (cs) {
        for (std::int64_t j = 0; j < cols; ++j) {
          acc[r][j] = static_cast<std::int32_t>(static_cast<std::uint32_t>(acc[r][j]) -
                                                static_cast<std::uint32_t>(zp_) * static_cast<std::uint32_t>(cs[j]));
        }
      }
      for (std::int64_t j = 0; j < cols; ++j) out[j] = static_cast<float>(acc[r][j]) * mult[n0 + j];
    }
  }

  void TileScalar(const std::int16_t* a, int block, int rows, std::int64_t n0, std::int32_t (*acc)[kCols]) const {
    for (int r = 0; r < rows; ++r) {
      for (std::int64_t j = 0; j < kCols; ++j) {
        std::uint32_t sum = 0;  // wraps as the vector sums do, past int32
        for (std::int64_t p = 0; p < kg_; ++p) {
          const std::size_t i = static_cast<std::size_t>(block * block_len_ + (((n0 / kCols) * kg_ + p) * kCols + j) * 2);
          const int w0 = wide_ ? w16_[i] : w8_[i], w1 = wide_ ? w16_[i + 1] : w8_[i + 1];
          sum += static_cast<std::uint32_t>(a[r * kp_ + 2 * p] * w0 + a[r * kp_ + 2 * p + 1] * w1);
        }
        acc[r][j] = static_cast<std::int32_t>(sum);
      }
    }
  }

  // Up to kRows rows by kCols columns: per pair of k, the 16 columns' two
  // weights widened to int16 (two vectors), each row's pair of A values
  // broadcast, and vpmaddwd: a0 * w(k0, n) + a1 * w(k1, n) per int32 lane.
  template <typename T>
  __attribute__((target("avx2"))) void TileAvx2(const std::int16_t* a, const T* w, int rows, std::int64_t n0,
                                                std::int32_t (*acc)[kCols]) const {
    __m256i c0[kRows], c1[kRows];
    for (int r = 0; r < kRows; ++r) c0[r] = c1[r] = _mm256_setzero_si256();
    for (std::int64_t p = 0; p < kg_; ++p) {
      const T* wr = w + ((n0 / kCols) * kg_ + p) * kCols * 2;
      __m256i w0, w1;
      if constexpr (sizeof(T) == 1) {
        w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wr)));
        w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wr + 16)));
      } else {
        w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr));
        w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr + 16));
      }
      for (int r = 0; r < kRows; ++r) {
        if (r >= rows) break;
        std::int32_t pair;
        std::memcpy(&pair, a + r * kp_ + 2 * p, sizeof(pair));
        const __m256i av = _mm256_set1_epi32(pair);
        c0[r] = _mm256_add_epi32(c0[r], _mm256_madd_epi16(av, w0));
        c1[r] = _mm256_add_epi32(c1[r], _mm256_madd_epi16(av, w1));
      }
    }
    for (int r = 0; r < rows; ++r) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc[r]), c0[r]);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc[r] + 8), c1[r]);
    }
  }

  // 7-bit weights: per group of four k, each row's four uint8 values
  // broadcast, vpmaddubsw against 8 columns' four weights (int16 pair sums),
  // vpmaddwd by ones (int32 sums of four products).
  __attribute__((target("avx2"))) void TileNarrowAvx2(const std::uint8_t* a, const std::int8_t* w, int rows,
                                                      std::int64_t n0, std::int32_t (*acc)[kCols]) const {
    __m256i c0[kRows], c1[kRows];
    for (int r = 0; r < kRows; ++r) c0[r] = c1[r] = _mm256_setzero_si256();
    const __m256i ones = _mm256_set1_epi16(1);
    const std::int64_t lda = kg_ * 4;
    for (std::int64_t q = 0; q < kg_; ++q) {
      const std::int8_t* wr = w + ((n0 / kCols) * kg_ + q) * kCols * 4;
      const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr));
      const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr + 32));
      for (int r = 0; r < kRows; ++r) {
        if (r >= rows) break;
        std::int32_t quad;
        std::memcpy(&quad, a + r * lda + 4 * q, sizeof(quad));
        const __m256i av = _mm256_set1_epi32(quad);
        c0[r] = _mm256_add_epi32(c0[r], _mm256_madd_epi16(_mm256_maddubs_epi16(av, w0), ones));
        c1[r] = _mm256_add_epi32(c1[r], _mm256_madd_epi16(_mm256_maddubs_epi16(av, w1), ones));
      }
    }
    for (int r = 0; r < rows; ++r) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc[r]), c0[r]);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc[r] + 8), c1[r]);
    }
  }

  // kg_: groups of `group_` k values (kp_ = 2 kg_ on the int16 route).
  std::int64_t m_ = 0, k_ = 0, n_ = 0, kp_ = 0, np_ = 0, block_len_ = 0, kg_ = 0, group_ = 2;
  std::int32_t zp_ = 0;
  bool wide_ = false, narrow_ = false;
  std::vector<std::int32_t> colsum_;  // narrow: per block and column, the sum of w - zp
  std::vector<std::uint8_t> a8_;      // narrow: [m][kq * 4] uint8 (DynamicQuantizeLinear's values)
  std::vector<std::int8_t> w8_;    // [blocks][np / kCols][kg][kCols][group] (Init)
  std::vector<std::int16_t> w16_;  // the same, where w - zp needs 16 bits
  std::vector<std::int16_t> a_;    // [m][kp]
};

// ---------------------------------------------------------------------------

enum class Cell { kLstm, kGru, kRnn };

class RnnKernel : public Kernel {
 public:
  Status Init(const KernelInit& init) {
    const ir::Node& n = *init.node;
    const std::string& op = n.op_type();
    quantized_ = op == "DynamicQuantizeLSTM";
    cell_ = op == "LSTM" || quantized_ ? Cell::kLstm : op == "GRU" ? Cell::kGru : Cell::kRnn;
    gates_ = cell_ == Cell::kLstm ? 4 : cell_ == Cell::kGru ? 3 : 1;
    const int acts_per_dir = cell_ == Cell::kLstm ? 3 : cell_ == Cell::kGru ? 2 : 1;
    for (std::size_t i = 0; i < init.inputs.size(); ++i) {
      const bool eight_bit = quantized_ && (i == 1 || i == 2 || i == 9 || i == 11);
      if (init.inputs[i].present() && i != 4 && !eight_bit && init.inputs[i].dtype != DType::kFloat32) {
        return Error(StatusCode::kUnimplemented, "input ", i, " has type ", DTypeName(init.inputs[i].dtype),
                     "; the CPU kernel supports float32 only");
      }
    }

    const std::string direction = n.GetString("direction", "forward");
    if (direction == "forward") dirs_ = {false};
    else if (direction == "reverse") dirs_ = {true};
    else if (direction == "bidirectional") dirs_ = {false, true};
    else return Error(StatusCode::kInvalidArgument, "attribute 'direction' is '", direction, "'");
    nd_ = static_cast<int>(dirs_.size());
    layout_ = n.GetInt("layout", 0);
    clip_ = n.GetFloat("clip", 0.f);
    input_forget_ = n.GetInt("input_forget", 0) != 0;
    linear_before_reset_ = n.GetInt("linear_before_reset", 0) != 0;

    const Shape& x = init.inputs[0].shape;
    seq_ = layout_ ? x[1] : x[0];
    batch_ = layout_ ? x[0] : x[1];
    in_ = x[2];
    hidden_ = quantized_ ? init.inputs[2].shape[1] : init.inputs[2].shape[2];
    gh_ = gates_ * hidden_;

    // Activations: the given names (f, g(, h) per direction), or the defaults.
    std::vector<std::string> names;
    if (const ir::Attribute* a = n.FindAttr("activations")) names = a->strings;
    if (names.empty()) {
      for (int d = 0; d < nd_; ++d) {
        if (cell_ == Cell::kLstm) names.insert(names.end(), {"Sigmoid", "Tanh", "Tanh"});
        else if (cell_ == Cell::kGru) names.insert(names.end(), {"Sigmoid", "Tanh"});
        else names.push_back("Tanh");
      }
    }
    if (names.size() != static_cast<std::size_t>(acts_per_dir * nd_)) {
      return Error(StatusCode::kInvalidArgument, "attribute 'activations' has ", names.size(),
                   " names, expected ", acts_per_dir * nd_);
    }
    const std::vector<float> alphas = n.GetFloats("activation_alpha");
    const std::vector<float> betas = n.GetFloats("activation_beta");
    std::size_t ai = 0, bi = 0;
    for (const std::string& s : names) {
      KILN_ASSIGN_OR_RETURN(ActFn f, ParseAct(s, alphas, ai, betas, bi));
      acts_.push_back(f);
    }

    auto has = [&](int i) { return static_cast<int>(init.inputs.size()) > i && init.inputs[i].present(); };
    has_b_ = has(3);
    has_lens_ = has(4);
    lens_int64_ = has_lens_ && init.inputs[4].dtype == DType::kInt64;
    has_h0_ = has(5);
    has_c0_ = has(6);
    has_p_ = has(7);
    num_outputs_ = static_cast<int>(init.outputs.size());

    // Scratch, sized once.
    const std::size_t bh = static_cast<std::size_t>(batch_ * hidden_);
    gx_.assign(static_cast<std::size_t>(seq_ * batch_ * nd_ * gh_), 0.f);
    gates_buf_.assign(static_cast<std::size_t>(batch_ * gh_), 0.f);
    h_.assign(bh * nd_, 0.f);
    if (cell_ == Cell::kLstm) c_.assign(bh * nd_, 0.f);
    if (cell_ == Cell::kGru && !linear_before_reset_) {
      rh_.assign(bh, 0.f);
      hh_.assign(bh, 0.f);
    }
    bias_.assign(static_cast<std::size_t>(nd_ * gh_), 0.f);
    rbh_.assign(static_cast<std::size_t>(nd_ * hidden_), 0.f);
    lens_.assign(static_cast<std::size_t>(batch_), seq_);

    if (quantized_) return InitQuantized(init);

    // Matmuls. W: [nd, G*H, I] (all directions in one product); R: [nd, G*H, H].
    const HostTensor* w_const = init.const_input(1);
    const HostTensor* r_const = init.const_input(2);
    const float* wc = w_const ? w_const->data_as<float>() : nullptr;
    const float* rc = r_const ? r_const->data_as<float>() : nullptr;
    KILN_RETURN_IF_ERROR(proj_.Init("input projection X·Wᵀ", seq_ * batch_, in_, nd_ * gh_, wc, {0}));
    std::vector<std::int64_t> r_offsets, rh_offsets;
    for (int d = 0; d < nd_; ++d) {
      r_offsets.push_back(d * gh_ * hidden_);
      rh_offsets.push_back(d * gh_ * hidden_ + 2 * hidden_ * hidden_);
    }
    const bool split_gru = cell_ == Cell::kGru && !linear_before_reset_;
    KILN_RETURN_IF_ERROR(rec_.Init("recurrent product H·Rᵀ", batch_, hidden_,
                                   split_gru ? 2 * hidden_ : gh_, rc, r_offsets));
    if (split_gru) {
      KILN_RETURN_IF_ERROR(rec_h_.Init("recurrent product (r⊙H)·Rhᵀ", batch_, hidden_, hidden_, rc, rh_offsets));
    }
    return Status::Ok();
  }

  // DynamicQuantizeLSTM: constant 8-bit W [nd, I, 4H] and R [nd, H, 4H],
  // one zero point each (inference checked that a constant zero point
  // tensor holds one value throughout), scales per direction or column.
  Status InitQuantized(const KernelInit& init) {
    const char* const names[] = {"", "W", "R", "", "", "", "", "", "W_scale", "W_zero_point", "R_scale",
                                 "R_zero_point"};
    for (int i : {1, 2, 8, 9, 10, 11}) {
      if (!init.const_input(i)) {
        return Error(StatusCode::kUnimplemented, "input ", i, " (", names[i],
                     ") is computed at run time; DynamicQuantizeLSTM needs it constant");
      }
    }
    auto zero_point = [&](int i) -> std::int32_t {
      const HostTensor& z = *init.const_input(i);
      if (z.numel() == 0) return 0;
      return z.dtype() == DType::kUInt8 ? z.data_as<std::uint8_t>()[0] : z.data_as<std::int8_t>()[0];
    };
    auto scales = [&](int i) {
      const HostTensor& t = *init.const_input(i);
      const std::int64_t per = t.numel() / nd_;
      std::vector<float> out(static_cast<std::size_t>(nd_ * gh_));
      for (int d = 0; d < nd_; ++d) {
        for (std::int64_t j = 0; j < gh_; ++j) out[d * gh_ + j] = t.data_as<float>()[d * per + (per == 1 ? 0 : j)];
      }
      return out;
    };
    w_scale_ = scales(8);
    r_scale_ = scales(10);
    // X·W for every direction in one product: W [nd, I, 4H] as one
    // [I, nd * 4H] block (one zero point: inference checked that they are
    // all equal).
    const HostTensor& w = *init.const_input(1);
    HostTensor joined(w.dtype(), {1, in_, nd_ * gh_});
    for (int d = 0; d < nd_; ++d) {
      for (std::int64_t i = 0; i < in_; ++i) {
        std::memcpy(static_cast<std::uint8_t*>(joined.mutable_data()) + (i * nd_ + d) * gh_,
                    static_cast<const std::uint8_t*>(w.data()) + (d * in_ + i) * gh_, static_cast<std::size_t>(gh_));
      }
    }
    KILN_RETURN_IF_ERROR(qproj_.Init(seq_ * batch_, in_, nd_ * gh_, joined, {zero_point(9)}));
    KILN_RETURN_IF_ERROR(qrec_.Init(batch_, hidden_, gh_, *init.const_input(2),
                                    std::vector<std::int32_t>(static_cast<std::size_t>(nd_), zero_point(11))));
    hq_.assign(static_cast<std::size_t>(batch_ * hidden_), 0.f);
    mult_.assign(static_cast<std::size_t>(nd_ * gh_), 0.f);
    return Status::Ok();
  }

  std::size_t workspace_bytes() const override {
    return std::max({proj_.scratch_bytes(), rec_.scratch_bytes(), rec_h_.scratch_bytes()});
  }

  Status Run(const KernelArgs& args) override {
    ctx_ = args.ctx;
    const float* x = args.in_as<float>(0);
    const float* w = args.in_as<float>(1);
    const float* r = args.in_as<float>(2);
    const float* b = has_b_ ? args.in_as<float>(3) : nullptr;
    const float* h0 = has_h0_ ? args.in_as<float>(5) : nullptr;
    const float* c0 = has_c0_ ? args.in_as<float>(6) : nullptr;
    const float* p = has_p_ ? args.in_as<float>(7) : nullptr;
    float* y = num_outputs_ > 0 ? args.out_as<float>(0) : nullptr;
    float* y_h = num_outputs_ > 1 ? args.out_as<float>(1) : nullptr;
    float* y_c = num_outputs_ > 2 ? args.out_as<float>(2) : nullptr;

    if (has_lens_) {
      for (std::int64_t i = 0; i < batch_; ++i) {
        const std::int64_t len = lens_int64_ ? args.in_as<std::int64_t>(4)[i] : args.in_as<std::int32_t>(4)[i];
        if (len < 0 || len > seq_) {
          return Error(StatusCode::kInvalidArgument, "input 4 (sequence_lens) has ", len, " for batch entry ", i,
                       ", expected 0..", seq_, " (seq_length)");
        }
        lens_[i] = len;
      }
    }

    // Biases: Wb + Rb per gate, except GRU's Rbh with linear_before_reset
    // (it goes inside r ⊙ (...)).
    std::fill(bias_.begin(), bias_.end(), 0.f);
    std::fill(rbh_.begin(), rbh_.end(), 0.f);
    if (b) {
      for (int d = 0; d < nd_; ++d) {
        const float* wb = b + d * 2 * gh_;
        const float* rb = wb + gh_;
        float* out = bias_.data() + d * gh_;
        for (std::int64_t i = 0; i < gh_; ++i) out[i] = wb[i] + rb[i];
        if (cell_ == Cell::kGru && linear_before_reset_) {
          for (std::int64_t i = 0; i < hidden_; ++i) {
            out[2 * hidden_ + i] = wb[2 * hidden_ + i];
            rbh_[d * hidden_ + i] = rb[2 * hidden_ + i];
          }
        }
      }
    }

    if (quantized_) ProjectQuantized(x);
    else proj_.Run(x, w, 0, gx_.data(), ctx_);

    for (int d = 0; d < nd_; ++d) {
      KILN_RETURN_IF_ERROR(RunDirection(d, r, p, h0, c0, y));
    }

    // Final states.
    for (int d = 0; d < nd_; ++d) {
      for (std::int64_t bb = 0; bb < batch_; ++bb) {
        const std::size_t src = static_cast<std::size_t>((d * batch_ + bb) * hidden_);
        const std::size_t dst = static_cast<std::size_t>(StateIndex(d, bb));
        if (y_h) std::memcpy(y_h + dst, h_.data() + src, hidden_ * sizeof(float));
        if (y_c) {
          if (cell_ == Cell::kLstm) std::memcpy(y_c + dst, c_.data() + src, hidden_ * sizeof(float));
        }
      }
    }
    return Status::Ok();
  }

 private:
  // DynamicQuantizeLSTM's X·W into gx_: X quantized over its first
  // max(sequence_lens) steps (the rows ONNX Runtime's product covers).
  void ProjectQuantized(const float* x) {
    const std::int64_t steps = lens_.empty() ? 0 : *std::max_element(lens_.begin(), lens_.end());
    float xs = 0.f;
    std::uint8_t xz = 0;
    DynamicQuantizeParams(x, steps * batch_ * in_, nullptr, &xs, &xz);
    qproj_.Quantize(x, xs, xz);
    for (std::int64_t j = 0; j < nd_ * gh_; ++j) mult_[j] = xs * w_scale_[j];
    qproj_.Run(0, mult_.data(), gx_.data(), nd_ * gh_);
  }

  // DynamicQuantizeLSTM's H·R of step s into g: H quantized over the whole
  // batch, an entry past its length as 0 when Y is written.
  void RecurrentQuantized(int d, std::int64_t s, const float* h, bool y_out, float* g) {
    const std::int64_t H = hidden_;
    for (std::int64_t bb = 0; bb < batch_; ++bb) {
      float* dst = hq_.data() + bb * H;
      if (y_out && lens_[bb] < s) std::fill(dst, dst + H, 0.f);
      else std::memcpy(dst, h + bb * H, H * sizeof(float));
    }
    float hs = 0.f;
    std::uint8_t hz = 0;
    DynamicQuantizeParams(hq_.data(), batch_ * H, nullptr, &hs, &hz);
    qrec_.Quantize(hq_.data(), hs, hz);
    const float* rs = r_scale_.data() + d * gh_;
    for (std::int64_t j = 0; j < gh_; ++j) mult_[j] = hs * rs[j];
    qrec_.Run(d, mult_.data(), g, gh_);
  }

  // Element offset of (direction, batch entry) in initial_h / Y_h / Y_c.
  std::int64_t StateIndex(int d, std::int64_t b) const {
    return (layout_ ? b * nd_ + d : d * batch_ + b) * hidden_;
  }
  // Element offset of (time, direction, batch entry) in Y.
  std::int64_t YIndex(std::int64_t t, int d, std::int64_t b) const {
    return (layout_ ? (b * seq_ + t) * nd_ + d : (t * nd_ + d) * batch_ + b) * hidden_;
  }
  // Row of gx_ (the projection of X) for (time, batch entry).
  std::int64_t XRow(std::int64_t t, std::int64_t b) const { return layout_ ? b * seq_ + t : t * batch_ + b; }

  Status RunDirection(int d, const float* r, const float* p, const float* h0, const float* c0, float* y) {
    const bool reverse = dirs_[d];
    const std::int64_t H = hidden_;
    float* h = h_.data() + d * batch_ * H;
    float* c = cell_ == Cell::kLstm ? c_.data() + d * batch_ * H : nullptr;
    for (std::int64_t bb = 0; bb < batch_; ++bb) {
      if (h0) std::memcpy(h + bb * H, h0 + StateIndex(d, bb), H * sizeof(float));
      else std::fill(h + bb * H, h + (bb + 1) * H, 0.f);
      if (c) {
        if (c0) std::memcpy(c + bb * H, c0 + StateIndex(d, bb), H * sizeof(float));
        else std::fill(c + bb * H, c + (bb + 1) * H, 0.f);
      }
    }
    const ActFn* act = acts_.data() + d * (cell_ == Cell::kLstm ? 3 : cell_ == Cell::kGru ? 2 : 1);
    const float* bias = bias_.data() + d * gh_;
    const float* pi = p ? p + d * 3 * H : nullptr;
    const float* po = p ? pi + H : nullptr;
    const float* pf = p ? pi + 2 * H : nullptr;
    const float* rbh = rbh_.data() + d * H;
    const std::int64_t gx_stride = nd_ * gh_;
    const float* gx = gx_.data() + d * gh_;
    float* g = gates_buf_.data();
    // Fork only for a lot of gate work per step (a fork costs more than small steps).
    const std::int64_t grain = std::max<std::int64_t>(1, 65536 / std::max<std::int64_t>(gh_, 1));

    for (std::int64_t s = 0; s < seq_; ++s) {
      // Recurrent product for all entries (finished ones are ignored below).
      if (quantized_) RecurrentQuantized(d, s, h, y != nullptr, g);
      else rec_.Run(h, r, d, g, ctx_);
      // Time index of entry bb at step s, or -1 when it is past its length.
      auto time_of = [&](std::int64_t bb) -> std::int64_t {
        const std::int64_t len = lens_[bb];
        if (s >= len) return -1;
        return reverse ? len - 1 - s : s;
      };
      // Pre-activations: gate row += projection + bias (no peephole yet).
      auto add_inputs = [&](std::int64_t bb, std::int64_t t, std::int64_t n_cols) {
        float* gr = g + bb * (cell_ == Cell::kGru && !linear_before_reset_ ? 2 * H : gh_);
        const float* xr = gx + XRow(t, bb) * gx_stride;
        if (quantized_) {
          for (std::int64_t i = 0; i < n_cols; ++i) gr[i] = (xr[i] + gr[i]) + bias[i];
        } else {
          for (std::int64_t i = 0; i < n_cols; ++i) gr[i] += xr[i] + bias[i];
        }
        return gr;
      };

      if (cell_ == Cell::kLstm) {
        ParallelFor(batch_, grain, [&](std::int64_t b0, std::int64_t b1) {
          for (std::int64_t bb = b0; bb < b1; ++bb) {
            const std::int64_t t = time_of(bb);
            if (t < 0) continue;
            float* gr = add_inputs(bb, t, gh_);
            float* gi = gr;
            float* go = gr + H;
            float* gf = gr + 2 * H;
            float* gc = gr + 3 * H;
            float* cp = c + bb * H;
            if (pi) for (std::int64_t i = 0; i < H; ++i) gi[i] += pi[i] * cp[i];
            if (clip_ > 0) Clip(gi, H, clip_);
            Apply(act[0], gi, H);
            if (input_forget_) {
              for (std::int64_t i = 0; i < H; ++i) gf[i] = 1.f - gi[i];
            } else {
              if (pf) for (std::int64_t i = 0; i < H; ++i) gf[i] += pf[i] * cp[i];
              if (clip_ > 0) Clip(gf, H, clip_);
              Apply(act[0], gf, H);
            }
            if (clip_ > 0) Clip(gc, H, clip_);
            Apply(act[1], gc, H);
            for (std::int64_t i = 0; i < H; ++i) cp[i] = gf[i] * cp[i] + gi[i] * gc[i];
            if (po) for (std::int64_t i = 0; i < H; ++i) go[i] += po[i] * cp[i];
            if (clip_ > 0) Clip(go, H, clip_);
            Apply(act[0], go, H);
            // h(C) into gc (no longer needed), then H = o ⊙ h(C).
            std::memcpy(gc, cp, H * sizeof(float));
            Apply(act[2], gc, H);
            float* hp = h + bb * H;
            for (std::int64_t i = 0; i < H; ++i) hp[i] = go[i] * gc[i];
          }
        });
      } else if (cell_ == Cell::kRnn) {
        ParallelFor(batch_, grain, [&](std::int64_t b0, std::int64_t b1) {
          for (std::int64_t bb = b0; bb < b1; ++bb) {
            const std::int64_t t = time_of(bb);
            if (t < 0) continue;
            float* gr = add_inputs(bb, t, H);
            if (clip_ > 0) Clip(gr, H, clip_);
            Apply(act[0], gr, H);
            std::memcpy(h + bb * H, gr, H * sizeof(float));
          }
        });
      } else if (linear_before_reset_) {
        // GRU, h~ = g(Xh·Whᵀ + Wbh + r ⊙ (H·Rhᵀ + Rbh)).
        ParallelFor(batch_, grain, [&](std::int64_t b0, std::int64_t b1) {
          for (std::int64_t bb = b0; bb < b1; ++bb) {
            const std::int64_t t = time_of(bb);
            if (t < 0) continue;
            float* gr = g + bb * gh_;
            const float* xr = gx + XRow(t, bb) * gx_stride;
            float* gz = gr;
            float* grr = gr + H;
            float* gn = gr + 2 * H;
            for (std::int64_t i = 0; i < 2 * H; ++i) gr[i] += xr[i] + bias[i];
            if (clip_ > 0) Clip(gr, 2 * H, clip_);
            Apply(act[0], gr, 2 * H);
            for (std::int64_t i = 0; i < H; ++i) {
              gn[i] = xr[2 * H + i] + bias[2 * H + i] + grr[i] * (gn[i] + rbh[i]);
            }
            if (clip_ > 0) Clip(gn, H, clip_);
            Apply(act[1], gn, H);
            float* hp = h + bb * H;
            for (std::int64_t i = 0; i < H; ++i) hp[i] = (1.f - gz[i]) * gn[i] + gz[i] * hp[i];
          }
        });
      } else {
        // GRU, h~ = g(Xh·Whᵀ + (r ⊙ H)·Rhᵀ + Wbh + Rbh): z and r first, then
        // the second product.
        float* rh = rh_.data();
        ParallelFor(batch_, grain, [&](std::int64_t b0, std::int64_t b1) {
          for (std::int64_t bb = b0; bb < b1; ++bb) {
            const std::int64_t t = time_of(bb);
            float* rrow = rh + bb * H;
            const float* hp = h + bb * H;
            if (t < 0) {
              std::fill(rrow, rrow + H, 0.f);
              continue;
            }
            float* gr = add_inputs(bb, t, 2 * H);
            if (clip_ > 0) Clip(gr, 2 * H, clip_);
            Apply(act[0], gr, 2 * H);
            for (std::int64_t i = 0; i < H; ++i) rrow[i] = gr[H + i] * hp[i];
          }
        });
        rec_h_.Run(rh, r, d, hh_.data(), ctx_);
        ParallelFor(batch_, grain, [&](std::int64_t b0, std::int64_t b1) {
          for (std::int64_t bb = b0; bb < b1; ++bb) {
            const std::int64_t t = time_of(bb);
            if (t < 0) continue;
            const float* gz = g + bb * 2 * H;
            float* gn = hh_.data() + bb * H;
            const float* xr = gx + XRow(t, bb) * gx_stride + 2 * H;
            for (std::int64_t i = 0; i < H; ++i) gn[i] += xr[i] + bias[2 * H + i];
            if (clip_ > 0) Clip(gn, H, clip_);
            Apply(act[1], gn, H);
            float* hp = h + bb * H;
            for (std::int64_t i = 0; i < H; ++i) hp[i] = (1.f - gz[i]) * gn[i] + gz[i] * hp[i];
          }
        });
      }

      // Y at step s: each running entry's new state at its time; finished
      // entries write zeros at time s (covering their tail s >= len).
      if (y) {
        for (std::int64_t bb = 0; bb < batch_; ++bb) {
          const std::int64_t t = time_of(bb);
          float* dst = y + YIndex(t < 0 ? s : t, d, bb);
          if (t < 0) std::fill(dst, dst + H, 0.f);
          else std::memcpy(dst, h + bb * H, H * sizeof(float));
        }
      }
    }
    return Status::Ok();
  }

  Cell cell_ = Cell::kLstm;
  int gates_ = 4, nd_ = 1, num_outputs_ = 0;
  std::vector<bool> dirs_;  // per direction: reverse?
  std::vector<ActFn> acts_;
  std::int64_t layout_ = 0, seq_ = 0, batch_ = 0, in_ = 0, hidden_ = 0, gh_ = 0;
  float clip_ = 0.f;
  bool input_forget_ = false, linear_before_reset_ = false;
  bool has_b_ = false, has_lens_ = false, lens_int64_ = false, has_h0_ = false, has_c0_ = false, has_p_ = false;
  TransposedMatMul proj_, rec_, rec_h_;
  // DynamicQuantizeLSTM: its products, quantized operands, scales per
  // direction and column.
  bool quantized_ = false;
  QuantizedProduct qproj_, qrec_;
  std::vector<float> hq_, mult_, w_scale_, r_scale_;
  const device::ExecContext* ctx_ = nullptr;  // of the run in progress (its workspace)
  std::vector<float> gx_, gates_buf_, h_, c_, rh_, hh_, bias_, rbh_;
  std::vector<std::int64_t> lens_;
};

Result<std::unique_ptr<Kernel>> MakeRnn(const KernelInit& init) {
  auto k = std::make_unique<RnnKernel>();
  KILN_RETURN_IF_ERROR(k->Init(init));
  return std::unique_ptr<Kernel>(std::move(k));
}

}  // namespace

void RegisterRnnKernels(KernelRegistry& r) {
  r.Register("LSTM", MakeRnn);
  r.Register("GRU", MakeRnn);
  r.Register("RNN", MakeRnn);
  r.Register("DynamicQuantizeLSTM", MakeRnn, ops::kMicrosoftDomain);
}

}  // namespace kiln::cpu
