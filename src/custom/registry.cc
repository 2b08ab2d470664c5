#include "custom/registry.h"

#include <dlfcn.h>
#include <sys/utsname.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>

#include "ops/op_registry.h"

namespace kiln {
namespace custom {
namespace {

std::mutex& Mu() {
  static std::mutex m;
  return m;
}
std::map<std::string, std::unique_ptr<CustomOp>>& Owned() {
  static auto* m = new std::map<std::string, std::unique_ptr<CustomOp>>();
  return *m;
}
std::map<std::string, Registered>& Table() {
  static auto* m = new std::map<std::string, Registered>();
  return *m;
}

class InferCtx final : public InferShapeContext {
 public:
  explicit InferCtx(ops::InferContext& c) : c_(c), attrs_(c.node()) {}
  const std::string& node_name() const override { return c_.node().name(); }
  int num_inputs() const override { return c_.num_inputs(); }
  int num_outputs() const override { return c_.num_outputs(); }
  const Shape& input_shape(int i) const override {
    static const Shape kEmpty;
    return i >= 0 && i < num_inputs() && c_.has_input(i) ? c_.in_shape(i) : kEmpty;
  }
  DType input_dtype(int i) const override {
    return i >= 0 && i < num_inputs() && c_.has_input(i) ? c_.in_dtype(i) : DType::kUndefined;
  }
  Status SetOutputShape(int i, Shape shape) override {
    if (i < 0 || i >= num_outputs()) return c_.Fail("SetOutputShape: output index ", i, " out of range 0..", num_outputs() - 1);
    c_.node().output(i)->set_shape(std::move(shape));
    return Status::Ok();
  }
  Status SetOutputDataType(int i, DType t) override {
    if (i < 0 || i >= num_outputs()) return c_.Fail("SetOutputDataType: output index ", i, " out of range 0..", num_outputs() - 1);
    c_.node().output(i)->set_dtype(t);
    return Status::Ok();
  }
  const OpAttributes& attributes() const override { return attrs_; }

 private:
  ops::InferContext& c_;
  NodeAttributes attrs_;
};

Status InferCustom(ops::InferContext& c) {
  const Registered* r = Find(c.node().op_type());
  if (!r) return c.Fail("custom op type '", c.node().op_type(), "' is not registered");
  InferCtx ctx(c);
  KILN_RETURN_IF_ERROR(r->infer->InferShape(ctx).WithContext(c.node().Describe() + ": InferShape"));
  KILN_RETURN_IF_ERROR(r->infer->InferDataType(ctx).WithContext(c.node().Describe() + ": InferDataType"));
  for (int i = 0; i < c.num_outputs(); ++i) {
    ir::Value* o = c.node().output(i);
    if (!DTypeSupported(o->dtype())) return c.Fail("InferDataType left output ", i, " without a supported type");
  }
  return Status::Ok();
}

class Registrar final : public CustomOpRegistrar {
 public:
  Status Register(const std::string& op_type, std::unique_ptr<CustomOp> op) override {
    return RegisterCustomOp(op_type, std::move(op));
  }
};

}  // namespace

const Registered* Find(const std::string& op_type) {
  std::lock_guard<std::mutex> l(Mu());
  auto it = Table().find(op_type);
  return it == Table().end() ? nullptr : &it->second;
}

bool IsCustomNode(const ir::Node& n) {
  const ops::OpDef* d = ops::OpRegistry::Get().Find(n.op_type(), n.domain());
  return d && d->domain == "kiln.custom";
}

std::vector<std::string> PackageSearchDirs() {
  std::vector<std::string> dirs;
  const char* env = std::getenv("KILN_CUSTOM_OP_PATH");
  if (!env) return dirs;
  struct utsname u {};
  uname(&u);
  std::string os = "linux", arch = u.machine;
  std::stringstream ss(env);
  std::string d;
  while (std::getline(ss, d, ':')) {
    if (!d.empty()) dirs.push_back((std::filesystem::path(d) / "op_graph" / "lib" / os / arch).string());
  }
  return dirs;
}

}  // namespace custom

Status RegisterCustomOp(const std::string& op_type, std::unique_ptr<CustomOp> op) {
  if (op_type.empty() || !op) return Error(StatusCode::kInvalidArgument, "RegisterCustomOp: empty type or null op");
  if (const ops::OpDef* d = ops::OpRegistry::Get().Find(op_type, ""); d && d->domain != "kiln.custom") {
    return Error(StatusCode::kInvalidArgument, "RegisterCustomOp: '", op_type, "' is a built-in ONNX op type");
  }
  custom::Registered r;
  r.op = op.get();
  r.infer = dynamic_cast<ShapeInferOp*>(op.get());
  r.eager = dynamic_cast<EagerExecuteOp*>(op.get());
  r.updater = dynamic_cast<ArgsUpdater*>(op.get());
  if (!r.infer || !r.eager) {
    return Error(StatusCode::kInvalidArgument, "RegisterCustomOp: '", op_type,
                 "' must implement both ShapeInferOp and EagerExecuteOp");
  }
  {
    std::lock_guard<std::mutex> l(custom::Mu());
    if (custom::Table().count(op_type)) {
      return Error(StatusCode::kInvalidArgument, "RegisterCustomOp: '", op_type, "' is already registered");
    }
    custom::Table()[op_type] = r;
    custom::Owned()[op_type] = std::move(op);
  }
  ops::OpDef d;
  d.type = op_type;
  d.domain = "kiln.custom";
  d.versions = {1};
  d.min_inputs = 0;
  d.max_inputs = 1 << 20;
  d.min_outputs = 1;
  d.max_outputs = 1 << 20;
  d.any_attributes = true;
  d.infer = custom::InferCustom;
  ops::OpRegistry::Get().Register(d);
  return Status::Ok();
}

CustomOp* FindCustomOp(const std::string& op_type) {
  const custom::Registered* r = custom::Find(op_type);
  return r ? r->op : nullptr;
}

Status LoadCustomOpLibrary(const std::string& path) {
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) return Error(StatusCode::kNotFound, "cannot load custom-op library '", path, "': ", dlerror());
  using AbiFn = std::uint32_t (*)();
  using RegFn = int (*)(CustomOpRegistrar*, char*, std::size_t);
  auto abi = reinterpret_cast<AbiFn>(dlsym(h, "kiln_custom_op_abi_version"));
  auto reg = reinterpret_cast<RegFn>(dlsym(h, "kiln_register_custom_ops"));
  if (!abi || !reg) {
    dlclose(h);
    return Error(StatusCode::kInvalidArgument, "custom-op library '", path,
                 "' does not export kiln_custom_op_abi_version / kiln_register_custom_ops (built without KILN_CUSTOM_OP_PACKAGE?)");
  }
  if (abi() != kCustomOpAbiVersion) {
    std::uint32_t v = abi();
    dlclose(h);
    return Error(StatusCode::kInvalidArgument, "custom-op library '", path, "' has ABI version ", v,
                 ", this Kiln needs ", kCustomOpAbiVersion, ": rebuild it against this Kiln's headers");
  }
  custom::Registrar r;
  char err[1024] = {};
  if (reg(&r, err, sizeof err) != 0) {
    return Error(StatusCode::kInvalidArgument, "custom-op library '", path, "' failed to register its ops: ", err);
  }
  return Status::Ok();  // the library stays loaded: its ops are registered
}

Status LoadCustomOpPackages() {
  static std::mutex mu;
  static std::map<std::string, bool> loaded;
  std::lock_guard<std::mutex> l(mu);
  std::vector<std::string> dirs = custom::PackageSearchDirs();
  for (const std::string& d : dirs) {
    std::error_code ec;
    if (!std::filesystem::is_directory(d, ec)) continue;
    std::vector<std::string> libs;
    for (auto& e : std::filesystem::directory_iterator(d, ec)) {
      if (e.path().extension() == ".so") libs.push_back(e.path().string());
    }
    std::sort(libs.begin(), libs.end());
    for (const std::string& lib : libs) {
      if (loaded[lib]) continue;
      KILN_RETURN_IF_ERROR(LoadCustomOpLibrary(lib));
      loaded[lib] = true;
    }
  }
  return Status::Ok();
}

}  // namespace kiln
