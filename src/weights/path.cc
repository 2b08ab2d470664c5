#include "weights/path.h"

namespace kiln::weights {

namespace fs = std::filesystem;

Result<fs::path> ResolveInside(const fs::path& dir, const std::string& location, const std::string& what) {
  fs::path loc(location);
  if (location.empty() || loc.is_absolute()) {
    return Error(StatusCode::kInvalidArgument, what, ": weight location '", location,
                 "' must be a relative path inside '", dir.string(), "'");
  }
  if (location.find('\0') != std::string::npos) {
    return Error(StatusCode::kInvalidArgument, what, ": weight location contains a NUL byte");
  }
  for (const auto& part : loc) {
    if (part == "..") {
      return Error(StatusCode::kInvalidArgument, what, ": weight location '", location, "' contains '..'");
    }
  }
  std::error_code ec;
  fs::path root = fs::weakly_canonical(dir, ec);
  if (ec) return Error(StatusCode::kNotFound, what, ": weight directory '", dir.string(), "' cannot be resolved");
  fs::path full = fs::weakly_canonical(dir / loc, ec);
  if (ec) return Error(StatusCode::kNotFound, what, ": cannot resolve '", location, "' in '", dir.string(), "'");
  auto rel = full.lexically_relative(root);
  if (rel.empty() || *rel.begin() == "..") {
    return Error(StatusCode::kInvalidArgument, what, ": weight location '", location,
                 "' resolves outside the weight directory '", root.string(), "' (to ", full.string(), ")");
  }
  return full;
}

}  // namespace kiln::weights
