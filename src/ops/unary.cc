// Elementwise unary math ops: Abs, Neg, Sign, Ceil, Floor, Round, Sqrt,
// Reciprocal, Exp, Log, Erf, Softplus, Elu, Selu, Not. Output = input's type
// and shape. Version 1 forms only add the ignored `consumed_inputs`.
#include "ops/math_common.h"

namespace kiln::ops {

void RegisterUnaryOps(OpRegistry& r) {
  const std::set<DType>& floats = FloatHalfTypes();
  const std::set<DType>& numeric = NumericHalfTypes();
  const std::set<DType> signed_num =
      Union({floats, {DType::kInt8, DType::kInt16, DType::kInt32, DType::kInt64}});
  struct Def {
    const char* name;
    std::vector<int> versions;
    std::set<std::string> attrs;
    const std::set<DType>* types;
  };
  const Def defs[] = {
      {"Abs", {1, 6, 13}, {"consumed_inputs"}, &numeric},
      {"Neg", {1, 6, 13}, {"consumed_inputs"}, &signed_num},
      {"Sign", {9, 13}, {}, &numeric},
      {"Ceil", {1, 6, 13}, {"consumed_inputs"}, &floats},
      {"Floor", {1, 6, 13}, {"consumed_inputs"}, &floats},
      {"Round", {11}, {}, &floats},
      {"Sqrt", {1, 6, 13}, {"consumed_inputs"}, &floats},
      {"Reciprocal", {1, 6, 13}, {"consumed_inputs"}, &floats},
      {"Exp", {1, 6, 13}, {"consumed_inputs"}, &floats},
      {"Log", {1, 6, 13}, {"consumed_inputs"}, &floats},
      {"Erf", {9, 13}, {}, &numeric},
      {"Softplus", {1}, {}, &floats},
      {"Elu", {1, 6}, {"alpha", "consumed_inputs"}, &floats},
      {"Selu", {1, 6}, {"alpha", "gamma", "consumed_inputs"}, &floats},
  };
  for (const Def& d : defs) {
    OpDef o;
    o.type = d.name;
    o.versions = d.versions;
    o.attributes = d.attrs;
    o.input_types = *d.types;
    o.infer = InferSameAsInput;
    r.Register(o);
  }
  OpDef n;
  n.type = "Not";
  n.versions = {1};
  n.input_types = {DType::kBool};
  n.infer = InferSameAsInput;
  r.Register(n);
}

}  // namespace kiln::ops
