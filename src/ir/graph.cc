#include "ir/graph.h"

#include "common/utf8.h"

#include <algorithm>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace kiln::ir {

const char* AttributeKindName(Attribute::Kind k) {
  switch (k) {
    case Attribute::Kind::kFloat: return "float";
    case Attribute::Kind::kInt: return "int";
    case Attribute::Kind::kString: return "string";
    case Attribute::Kind::kTensor: return "tensor";
    case Attribute::Kind::kGraph: return "graph";
    case Attribute::Kind::kFloats: return "floats";
    case Attribute::Kind::kInts: return "ints";
    case Attribute::Kind::kStrings: return "strings";
    case Attribute::Kind::kTensors: return "tensors";
    case Attribute::Kind::kGraphs: return "graphs";
    default: return "undefined";
  }
}

void Value::set_constant(HostTensorPtr t) {
  if (t) {
    dtype_ = t->dtype();
    shape_ = t->shape();
    dynamic_mask_ = 0;  // a constant's extents are known
  }
  constant_ = std::move(t);
}

bool Node::HasSubgraphs() const {
  for (auto& [k, a] : attrs_) {
    if (a.g || !a.graphs.empty()) return true;
  }
  return false;
}

void Node::SetInput(int i, Value* v) {
  if (i >= num_inputs()) inputs_.resize(static_cast<std::size_t>(i) + 1, nullptr);
  Value* old = inputs_[i];
  if (old) {
    auto& u = old->uses_;
    for (auto it = u.begin(); it != u.end(); ++it) {
      if (it->node == this && it->index == i) { u.erase(it); break; }
    }
  }
  inputs_[i] = v;
  if (v) v->uses_.push_back({this, i});
}

void Node::TrimAbsentTrailingInputs() {
  while (!inputs_.empty() && inputs_.back() == nullptr) inputs_.pop_back();
}

const Attribute* Node::FindAttr(const std::string& n) const {
  auto it = attrs_.find(n);
  return it == attrs_.end() ? nullptr : &it->second;
}

// The typed getters read an attribute only when it has that kind; one of
// another kind reads as absent. (ONNX attributes of the wrong type are refused
// at import, naming node, attribute, expected and found type; this keeps any
// other source, e.g. a hand-edited .kiln, from reading an unrelated field.)
std::int64_t Node::GetInt(const std::string& n, std::int64_t def) const {
  const Attribute* a = FindAttr(n);
  return a && a->kind == Attribute::Kind::kInt ? a->i : def;
}
float Node::GetFloat(const std::string& n, float def) const {
  const Attribute* a = FindAttr(n);
  return a && a->kind == Attribute::Kind::kFloat ? a->f : def;
}
std::string Node::GetString(const std::string& n, const std::string& def) const {
  const Attribute* a = FindAttr(n);
  return a && a->kind == Attribute::Kind::kString ? a->s : def;
}
std::vector<std::int64_t> Node::GetInts(const std::string& n, std::vector<std::int64_t> def) const {
  const Attribute* a = FindAttr(n);
  return a && a->kind == Attribute::Kind::kInts ? a->ints : def;
}
std::vector<float> Node::GetFloats(const std::string& n, std::vector<float> def) const {
  const Attribute* a = FindAttr(n);
  return a && a->kind == Attribute::Kind::kFloats ? a->floats : def;
}

std::string Node::Describe() const {
  return StrCat(op_type_, " node '", name_, "'");
}

std::string Graph::UniqueName(const std::string& base) {
  std::string b = base.empty() ? std::string("v") : base;
  if (!by_name_.count(b) && !(parent_ && parent_->LookupValue(b))) return b;
  int& c = name_counter_[b];
  std::string n;
  do {
    n = StrCat(b, "__", ++c);
  } while (by_name_.count(n));
  return n;
}

Value* Graph::AddValue(const std::string& name, DType dtype, Shape shape) {
  auto v = std::make_unique<Value>();
  Value* raw = v.get();
  v->dtype_ = dtype;
  v->shape_ = std::move(shape);
  v->owner_ = this;
  // One lookup for a name not taken yet (as every value of a cloned graph).
  if (!name.empty() && by_name_.try_emplace(name, raw).second) {
    v->name_ = name;
  } else {
    v->name_ = UniqueName(name);
    by_name_[raw->name_] = raw;
  }
  values_.push_back(std::move(v));
  return raw;
}

Value* Graph::AddConstant(const std::string& name, HostTensorPtr data) {
  Value* v = AddValue(name);
  v->set_constant(std::move(data));
  return v;
}

Node* Graph::AddNode(const std::string& op_type, const std::string& name,
                     const std::vector<Value*>& inputs, const std::vector<Value*>& outputs,
                     const std::string& domain) {
  auto n = std::make_unique<Node>();
  n->op_type_ = op_type;
  n->name_ = name;
  n->domain_ = domain;
  n->graph_ = this;
  Node* raw = n.get();
  for (std::size_t i = 0; i < inputs.size(); ++i) raw->SetInput(static_cast<int>(i), inputs[i]);
  for (Value* o : outputs) {
    raw->outputs_.push_back(o);
    o->producer_ = raw;
  }
  nodes_.push_back(std::move(n));
  return raw;
}

Node* Graph::AddCopyOf(const Node& n) {
  std::vector<Value*> ins, outs;
  for (const Value* v : n.inputs()) {
    if (!v) {
      ins.push_back(nullptr);
      continue;
    }
    Value* c = AddValue(v->name(), v->dtype(), v->shape());
    if (v->is_constant()) c->set_constant(v->constant());
    c->set_bound_value(v->bound_value());
    if (v->bound_provisional()) c->set_provisional_bound(v->value_upper_bound());
    else c->set_value_upper_bound(v->value_upper_bound(), v->value_nonnegative());
    c->set_raised_bound(v->raised_bound());
    ins.push_back(c);
  }
  for (const Value* v : n.outputs()) outs.push_back(AddValue(v->name(), v->dtype(), v->shape()));
  Node* c = AddNode(n.op_type(), n.name(), ins, outs, n.domain());
  c->set_since_version(n.since_version());
  c->attrs() = n.attrs();
  return c;
}

void Graph::RemoveNode(Node* n) {
  for (int i = 0; i < n->num_inputs(); ++i) n->SetInput(i, nullptr);
  for (Value* o : n->outputs_) {
    if (o->producer_ == n) o->producer_ = nullptr;
  }
  auto it = std::find_if(nodes_.begin(), nodes_.end(),
                         [n](const std::unique_ptr<Node>& p) { return p.get() == n; });
  if (it != nodes_.end()) nodes_.erase(it);
}

void Graph::ReplaceAllUses(Value* from, Value* to) {
  std::vector<Use> uses = from->uses_;
  for (const Use& u : uses) u.node->SetInput(u.index, to);
  for (Value*& o : outputs_) {
    if (o == from) o = to;
  }
  // Subgraphs (at any depth) may capture `from` by pointer.
  auto fix_subgraphs = [&](const Graph& g, auto& self) -> void {
    for (auto& n : g.nodes_) {
      for (auto& [k, a] : n->attrs_) {
        std::vector<std::shared_ptr<Graph>> subs = a.graphs;
        if (a.g) subs.push_back(a.g);
        for (auto& sg : subs) {
          for (auto& sn : sg->nodes_) {
            for (int i = 0; i < sn->num_inputs(); ++i) {
              if (sn->inputs_[i] == from) sn->SetInput(i, to);
            }
          }
          for (Value*& o : sg->outputs_) {
            if (o == from) o = to;
          }
          self(*sg, self);
        }
      }
    }
  };
  fix_subgraphs(*this, fix_subgraphs);
}

void Graph::RebindOutput(Node* n, int i, Value* v) {
  Value* old = n->outputs_[i];
  if (old && old->producer_ == n) old->producer_ = nullptr;
  n->outputs_[i] = v;
  v->producer_ = n;
}

Status Graph::RenameValue(Value* v, const std::string& new_name) {
  if (by_name_.count(new_name)) {
    return Error(StatusCode::kInternal, "cannot rename '", v->name_, "' to '", new_name, "': taken");
  }
  by_name_.erase(v->name_);
  v->name_ = new_name;
  by_name_[new_name] = v;
  return Status::Ok();
}

void Graph::RemoveUnusedValues() {
  std::unordered_set<const Value*> keep(inputs_.begin(), inputs_.end());
  keep.insert(outputs_.begin(), outputs_.end());
  std::vector<std::unique_ptr<Value>> kept;
  for (auto& v : values_) {
    if (v->producer_ || !v->uses_.empty() || keep.count(v.get())) {
      kept.push_back(std::move(v));
    } else {
      by_name_.erase(v->name_);
    }
  }
  values_ = std::move(kept);
}

Value* Graph::FindValue(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

Value* Graph::LookupValue(const std::string& name) const {
  for (const Graph* g = this; g; g = g->parent_) {
    if (Value* v = g->FindValue(name)) return v;
  }
  return nullptr;
}

bool Graph::IsGraphInput(const Value* v) const {
  return std::find(inputs_.begin(), inputs_.end(), v) != inputs_.end();
}
bool Graph::IsGraphOutput(const Value* v) const {
  return std::find(outputs_.begin(), outputs_.end(), v) != outputs_.end();
}

Status Graph::TopologicalSort() {
  std::unordered_map<const Node*, int> pending;
  std::vector<Node*> ready;
  std::unordered_map<const Node*, std::size_t> original_pos;
  for (std::size_t i = 0; i < nodes_.size(); ++i) original_pos[nodes_[i].get()] = i;
  // A node depends on the producers of its inputs and of the values its
  // subgraphs (at any depth) read from this graph.
  std::unordered_map<const Node*, std::vector<Node*>> dependents;
  auto add_sub_deps = [&](const Node& n, std::set<Node*>& deps, auto& self) -> void {
    for (auto& [k, a] : n.attrs_) {
      std::vector<std::shared_ptr<Graph>> subs = a.graphs;
      if (a.g) subs.push_back(a.g);
      for (auto& sg : subs) {
        for (auto& sn : sg->nodes_) {
          for (Value* in : sn->inputs_) {
            if (in && in->producer_ && in->owner_ == this) deps.insert(in->producer_);
          }
          self(*sn, deps, self);
        }
        for (Value* o : sg->outputs_) {
          if (o->producer_ && o->owner_ == this) deps.insert(o->producer_);
        }
      }
    }
  };
  for (auto& n : nodes_) {
    std::set<Node*> deps;
    for (Value* in : n->inputs_) {
      if (in && in->producer_ && in->owner_ == this) deps.insert(in->producer_);
    }
    add_sub_deps(*n, deps, add_sub_deps);
    for (Node* d : deps) dependents[d].push_back(n.get());
    pending[n.get()] = static_cast<int>(deps.size());
    if (deps.empty()) ready.push_back(n.get());
  }
  // Stable: among ready nodes keep the original order (min position first).
  std::vector<Node*> order;
  auto cmp = [&](Node* a, Node* b) { return original_pos[a] > original_pos[b]; };
  std::make_heap(ready.begin(), ready.end(), cmp);
  while (!ready.empty()) {
    std::pop_heap(ready.begin(), ready.end(), cmp);
    Node* n = ready.back();
    ready.pop_back();
    order.push_back(n);
    for (Node* u : dependents[n]) {
      if (--pending[u] == 0) {
        ready.push_back(u);
        std::push_heap(ready.begin(), ready.end(), cmp);
      }
    }
  }
  if (order.size() != nodes_.size()) {
    for (auto& n : nodes_) {
      if (pending[n.get()] > 0) {
        return Error(StatusCode::kInvalidArgument, "graph '", name_,
                     "' has a cycle or a use of an undefined value at ", n->Describe());
      }
    }
  }
  std::unordered_map<const Node*, std::unique_ptr<Node>> owned;
  for (auto& n : nodes_) owned[n.get()] = std::move(n);
  nodes_.clear();
  for (Node* n : order) nodes_.push_back(std::move(owned[n]));
  return Status::Ok();
}

namespace {

// Every name Kiln writes (JSON) must be valid UTF-8.
Status CheckUtf8(std::string_view s, const std::string& where, const char* what) {
  const std::size_t bad = FindInvalidUtf8(s);
  if (bad == std::string_view::npos) return Status::Ok();
  return Error(StatusCode::kInvalidArgument, where, what, " '", EscapeBytes(s), "' is not valid UTF-8 (byte ", bad, ")");
}

Status CheckNamesUtf8(const std::string& graph_name, const std::vector<std::unique_ptr<Value>>& values,
                      const std::vector<std::unique_ptr<Node>>& nodes) {
  KILN_RETURN_IF_ERROR(CheckUtf8(graph_name, "", "graph name"));
  for (auto& v : values) KILN_RETURN_IF_ERROR(CheckUtf8(v->name(), "", "value name"));
  for (auto& n : nodes) {
    KILN_RETURN_IF_ERROR(CheckUtf8(n->name(), "", "node name"));
    const std::string where = n->Describe() + ": ";
    KILN_RETURN_IF_ERROR(CheckUtf8(n->op_type(), where, "op type"));
    KILN_RETURN_IF_ERROR(CheckUtf8(n->domain(), where, "domain"));
    for (auto& [k, a] : n->attrs()) {
      KILN_RETURN_IF_ERROR(CheckUtf8(k, where, "attribute name"));
      KILN_RETURN_IF_ERROR(CheckUtf8(a.s, where + "attribute '" + k + "': ", "value"));
      for (auto& s : a.strings) KILN_RETURN_IF_ERROR(CheckUtf8(s, where + "attribute '" + k + "': ", "value"));
    }
  }
  return Status::Ok();
}

}  // namespace

Status Graph::Verify() const {
  KILN_RETURN_IF_ERROR(CheckNamesUtf8(name_, values_, nodes_));
  std::unordered_set<const Value*> defined;
  for (const Graph* g = parent_; g; g = g->parent_) {
    for (auto& v : g->values_) defined.insert(v.get());  // captured values
  }
  std::set<std::string> names;
  for (auto& v : values_) {
    if (!names.insert(v->name_).second) {
      return Error(StatusCode::kInvalidArgument, "graph '", name_, "': duplicate value name '",
                   v->name_, "'");
    }
    if (v->is_constant() || IsGraphInput(v.get())) {
      if (v->producer_) {
        return Error(StatusCode::kInvalidArgument, "graph '", name_, "': value '", v->name_,
                     "' is a constant or graph input but is also produced by ",
                     v->producer_->Describe());
      }
      defined.insert(v.get());
    }
  }
  for (auto& n : nodes_) {
    for (std::size_t i = 0; i < n->inputs_.size(); ++i) {
      Value* in = n->inputs_[i];
      if (in && !defined.count(in)) {
        return Error(StatusCode::kInvalidArgument, n->Describe(), ": input ", i, " '",
                     in->name_, "' is used before it is defined (or is never defined)");
      }
    }
    for (Value* o : n->outputs_) {
      if (!o) return Error(StatusCode::kInvalidArgument, n->Describe(), ": null output");
      if (o->producer_ != n.get()) {
        return Error(StatusCode::kInvalidArgument, n->Describe(), ": output '", o->name_,
                     "' has a different producer");
      }
      defined.insert(o);
    }
  }
  for (Value* o : outputs_) {
    if (!defined.count(o)) {
      return Error(StatusCode::kInvalidArgument, "graph '", name_, "': output '", o->name_,
                   "' is never produced");
    }
  }
  return Status::Ok();
}

bool IsHostPlaced(const Node& n) {
  const Attribute* a = n.FindAttr(kPlaceAttr);
  return a && a->kind == Attribute::Kind::kString && a->s == kPlaceHost;
}
bool IsCopyToHost(const Node& n) { return n.domain() == "kiln" && n.op_type() == kMemcpyToHost; }
bool IsCopyFromHost(const Node& n) { return n.domain() == "kiln" && n.op_type() == kMemcpyFromHost; }

void ForEachGraph(Graph& g, const std::function<void(Graph&)>& fn) {
  fn(g);
  for (auto& n : g.nodes()) {
    for (auto& [k, a] : n->attrs()) {
      if (a.g) ForEachGraph(*a.g, fn);
      for (auto& sub : a.graphs) {
        if (sub) ForEachGraph(*sub, fn);
      }
    }
  }
}

void ForEachGraph(const Graph& g, const std::function<void(const Graph&)>& fn) {
  ForEachGraph(const_cast<Graph&>(g), [&](Graph& x) { fn(x); });
}

namespace {

std::unique_ptr<Graph> CloneInto(const Graph& g, Graph* parent, std::unordered_map<const Value*, Value*>& map) {
  auto c = std::make_unique<Graph>();
  c->set_name(g.name());
  c->set_opset(g.opset());
  c->set_parent(parent);
  c->symbols() = g.symbols();
  c->gears() = g.gears();
  c->set_gears_only(g.gears_only());
  for (const auto& v : g.values()) {
    Value* n = c->AddValue(v->name(), v->dtype(), v->shape());
    n->set_dynamic_mask(v->dynamic_mask());
    n->set_symbolic_mask(v->symbolic_mask());
    n->dim_params() = v->dim_params();
    n->set_shape_input(v->shape_input());
    n->set_value_dims(v->value_dims());
    n->set_symbolic_elems(v->symbolic_elems_known(), v->symbolic_elems());
    n->set_rank_alternatives(v->rank_alternatives());
    if (v->is_constant()) n->set_constant(v->constant());
    n->set_bound_value(v->bound_value());
    if (v->bound_provisional()) n->set_provisional_bound(v->value_upper_bound());
    else n->set_value_upper_bound(v->value_upper_bound(), v->value_nonnegative());
    n->set_raised_bound(v->raised_bound());
    map[v.get()] = n;
  }
  auto mapped = [&map](const Value* v) -> Value* {
    if (!v) return nullptr;
    auto it = map.find(v);
    return it == map.end() ? nullptr : it->second;
  };
  for (const auto& n : g.nodes()) {
    std::vector<Value*> ins, outs;
    for (const Value* v : n->inputs()) ins.push_back(mapped(v));
    for (const Value* v : n->outputs()) outs.push_back(mapped(v));
    Node* cn = c->AddNode(n->op_type(), n->name(), ins, outs, n->domain());
    cn->set_since_version(n->since_version());
    cn->attrs() = n->attrs();
    for (auto& [k, a] : cn->attrs()) {
      if (a.g) a.g = CloneInto(*a.g, c.get(), map);
      for (auto& sg : a.graphs) {
        if (sg) sg = CloneInto(*sg, c.get(), map);
      }
    }
  }
  for (const Value* v : g.inputs()) c->inputs().push_back(mapped(v));
  for (const Value* v : g.outputs()) c->outputs().push_back(mapped(v));
  return c;
}

}  // namespace

std::unique_ptr<Graph> CloneGraph(const Graph& g) {
  std::unordered_map<const Value*, Value*> map;
  map.reserve(g.values().size() * 2);
  return CloneInto(g, g.parent(), map);
}

namespace {
// Every value `g` (and graphs nested in it) reads or yields, mapped to itself:
// CloneInto then maps the values the graphs own to their copies, and the
// rest (an enclosing graph's) stay shared.
void MapReadValues(const Graph& g, std::unordered_map<const Value*, Value*>& map) {
  for (const auto& n : g.nodes()) {
    for (const Value* v : n->inputs()) {
      if (v) map.emplace(v, const_cast<Value*>(v));
    }
    for (const auto& [k, a] : n->attrs()) {
      if (a.g) MapReadValues(*a.g, map);
      for (const auto& sg : a.graphs) {
        if (sg) MapReadValues(*sg, map);
      }
    }
  }
  for (const Value* v : g.outputs()) {
    if (v) map.emplace(v, const_cast<Value*>(v));
  }
}
}  // namespace

void DetachInputs(Graph& g, bool deep) {
  for (auto& n : g.nodes()) {
    for (int i = 0; i < n->num_inputs(); ++i) n->SetInput(i, nullptr);
    if (!deep) continue;
    for (auto& [k, a] : n->attrs()) {
      if (a.g) DetachInputs(*a.g, true);
      for (auto& sg : a.graphs) {
        if (sg) DetachInputs(*sg, true);
      }
    }
  }
}

bool HasSubgraphNodes(const Graph& g) {
  for (const auto& n : g.nodes()) {
    if (n->HasSubgraphs()) return true;
  }
  return false;
}

std::unique_ptr<Graph> CloneSubgraph(const Graph& g) {
  std::unordered_map<const Value*, Value*> map;
  MapReadValues(g, map);
  // CloneInto maps g's own values (and nested graphs') to their copies
  // before any node reads them.
  return CloneInto(g, g.parent(), map);
}

}  // namespace kiln::ir

namespace kiln::ir {

std::string DefaultSymbolName(const std::string& input, std::size_t dim) {
  std::size_t cut = std::min(input.size(), kMaxSymbolNameBytes - 24);
  while (cut > 0 && cut < input.size() && (static_cast<unsigned char>(input[cut]) & 0xC0) == 0x80) --cut;
  return input.substr(0, cut) + "_d" + std::to_string(dim);
}

std::string RangeText(const SymbolRange& r) {
  return std::to_string(r.min) + ".." + (r.max >= 0 ? std::to_string(r.max) : std::string());
}

}  // namespace kiln::ir
