// Single-node harness for op tests: builds `op(inputs) -> outputs` in a
// graph (constant inputs as constants, others as plain values), runs the
// op's import normalisation and inference, and evaluates it with the CPU
// kernel.
#pragma once

#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "backends/cpu/kernel.h"
#include "ir/graph.h"
#include "ops/op_registry.h"

namespace kiln::test {

template <typename T>
HostTensorPtr Tensor(DType t, Shape s, std::vector<T> v) {
  auto h = std::make_shared<HostTensor>(t, std::move(s));
  EXPECT_EQ(static_cast<std::size_t>(h->numel()), v.size());
  std::copy(v.begin(), v.end(), h->mutable_data_as<T>());
  return h;
}

template <typename T>
std::vector<T> Values(const HostTensorPtr& t) {
  return std::vector<T>(t->data_as<T>(), t->data_as<T>() + t->numel());
}

// An input: constant data, or (data == null) a runtime value of `dtype`/`shape`.
struct In {
  HostTensorPtr data;
  DType dtype = DType::kUndefined;
  Shape shape;
  In(HostTensorPtr t) : data(std::move(t)) {}  // NOLINT(google-explicit-constructor)
  In(DType t, Shape s) : dtype(t), shape(std::move(s)) {}
  In(std::nullptr_t) {}  // NOLINT(google-explicit-constructor): absent optional input
};

class NodeRunner {
 public:
  // `domain`: "" (ai.onnx) or e.g. ops::kMicrosoftDomain.
  NodeRunner(const std::string& op, int version, std::vector<In> inputs, int outputs = 1,
             const std::string& domain = "") {
    std::vector<ir::Value*> ins, outs;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const std::string name = "in" + std::to_string(i);
      if (inputs[i].data) ins.push_back(g_.AddConstant(name, inputs[i].data));
      else if (inputs[i].dtype != DType::kUndefined) ins.push_back(g_.AddValue(name, inputs[i].dtype, inputs[i].shape));
      else ins.push_back(nullptr);
    }
    for (int j = 0; j < outputs; ++j) outs.push_back(g_.AddValue("out" + std::to_string(j)));
    node_ = g_.AddNode(op, "node", ins, outs, domain);
    node_->set_since_version(version);
  }
  NodeRunner& Attr(const std::string& name, ir::Attribute a) {
    node_->SetAttr(name, std::move(a));
    return *this;
  }
  ir::Node& node() { return *node_; }
  const Shape& out_shape(int j = 0) const { return node_->output(j)->shape(); }
  DType out_dtype(int j = 0) const { return node_->output(j)->dtype(); }

  // Import normalisation, then inference.
  Status Infer() {
    const ops::OpDef* def = ops::OpRegistry::Get().Find(node_->op_type(), node_->domain());
    if (def && def->normalize) KILN_RETURN_IF_ERROR(def->normalize(*node_, g_));
    return ops::InferNode(*node_);
  }
  // Infers, then runs the kernel. `runtime` supplies data for the non-constant
  // inputs, in order.
  Result<std::vector<HostTensorPtr>> Run(std::vector<HostTensorPtr> runtime = {}) {
    KILN_RETURN_IF_ERROR(Infer());
    std::vector<HostTensorPtr> args;
    auto next = runtime.begin();
    for (ir::Value* v : node_->inputs()) {
      if (!v) args.push_back(nullptr);
      else if (v->is_constant()) args.push_back(v->constant());
      else args.push_back(next == runtime.end() ? nullptr : *next++);
    }
    return cpu::EvalNode(*node_, args);
  }

 private:
  ir::Graph g_;
  ir::Node* node_ = nullptr;
};

inline HostTensorPtr F32T(Shape s, std::vector<float> v) { return Tensor<float>(DType::kFloat32, std::move(s), std::move(v)); }
// float32 0, 1, 2, ... in shape s.
inline HostTensorPtr Iota(Shape s) {
  std::vector<float> v(static_cast<std::size_t>(NumElements(s)));
  std::iota(v.begin(), v.end(), 0.f);
  return F32T(std::move(s), v);
}
inline HostTensorPtr I64T(Shape s, std::vector<std::int64_t> v) { return Tensor<std::int64_t>(DType::kInt64, std::move(s), std::move(v)); }
inline HostTensorPtr I32T(Shape s, std::vector<std::int32_t> v) { return Tensor<std::int32_t>(DType::kInt32, std::move(s), std::move(v)); }

inline ir::Attribute Ints(std::vector<std::int64_t> v) { return ir::Attribute::Ints(std::move(v)); }
inline ir::Attribute Int(std::int64_t v) { return ir::Attribute::Int(v); }

}  // namespace kiln::test
