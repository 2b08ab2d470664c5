// Element functions of the activations a kernel may apply fused (Relu,
// LeakyRelu, Clip): the separate kernels (activation.cc) and the fusions that
// apply them inside another kernel (norm.cc's BatchNormalization) call these,
// so fused and unfused results agree by construction.
#pragma once

namespace kiln::cpu {

// NaN -> 0 (NaN > 0 is false), as oneDNN's relu post-op.
template <typename T>
inline T ReluElem(T x) {
  return x > T(0) ? x : T(0);
}

template <typename T>
inline T LeakyReluElem(T x, T alpha) {
  return x >= T(0) ? x : alpha * x;
}

// Branch-free (compare and blend: vectorizes); NaN fails both comparisons and
// passes through, as ONNX's reference does; lo > hi gives hi everywhere, as
// NumPy's clip.
template <typename T>
inline T ClipElem(T x, T lo, T hi) {
  const T v = x < lo ? lo : x;
  return v > hi ? hi : v;
}

}  // namespace kiln::cpu
