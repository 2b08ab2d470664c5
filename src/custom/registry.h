// Custom-op registry internals: the registered instances, their OpDefs
// (inference through ShapeInferOp) and package loading.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"
#include "kiln/custom_op.h"

namespace kiln::custom {

struct Registered {
  CustomOp* op = nullptr;
  ShapeInferOp* infer = nullptr;
  EagerExecuteOp* eager = nullptr;
  ArgsUpdater* updater = nullptr;  // null: not refreshable
};

// The registered op for this node's type, or null (built-in ops win).
const Registered* Find(const std::string& op_type);
bool IsCustomNode(const ir::Node& n);

// Attributes of an IR node through the public OpAttributes interface.
class NodeAttributes final : public OpAttributes {
 public:
  explicit NodeAttributes(const ir::Node& n) : n_(n) {}
  bool Has(const std::string& name) const override { return n_.HasAttr(name); }
  std::int64_t GetInt(const std::string& name, std::int64_t def) const override { return n_.GetInt(name, def); }
  float GetFloat(const std::string& name, float def) const override { return n_.GetFloat(name, def); }
  std::string GetString(const std::string& name, const std::string& def) const override { return n_.GetString(name, def); }
  std::vector<std::int64_t> GetInts(const std::string& name) const override { return n_.GetInts(name); }

 private:
  const ir::Node& n_;
};

// Where LoadCustomOpPackages looks, for error messages.
std::vector<std::string> PackageSearchDirs();

}  // namespace kiln::custom
