#include "backends/cuda/block_cache.h"

namespace kiln::cuda {

namespace {
constexpr std::size_t kSmall = std::size_t{1} << 20;   // rounded to 512 up to here
constexpr std::size_t kLargeStep = std::size_t{2} << 20;
}  // namespace

BlockCache::BlockCache(Backend backend) : backend_(std::move(backend)) {}

BlockCache::~BlockCache() {
  std::lock_guard<std::mutex> l(mu_);
  if (!in_use_.empty() || !pending_.empty() || !cached_.empty()) backend_.sync();
  for (auto& [p, size] : in_use_) backend_.free(p);
  for (auto& [p, size] : pending_) backend_.free(p);
  for (auto& [size, p] : cached_) backend_.free(p);
}

std::size_t BlockCache::RoundSize(std::size_t bytes) {
  if (bytes == 0) return 512;
  if (bytes <= kSmall) return (bytes + 511) / 512 * 512;
  if (bytes > SIZE_MAX - kLargeStep) return 0;  // cannot be rounded: refused
  return (bytes + kLargeStep - 1) / kLargeStep * kLargeStep;
}

void* BlockCache::TakeCachedLocked(std::size_t size) {
  auto it = cached_.lower_bound(size);
  if (it == cached_.end() || it->first / 2 > size) return nullptr;  // none, or over twice the need
  void* p = it->second;
  in_use_[p] = it->first;
  stats_.in_use_bytes += it->first;
  ++stats_.reuses;
  cached_.erase(it);
  return p;
}

void BlockCache::ReleaseCachedLocked() {
  for (auto& [size, p] : cached_) {
    backend_.free(p);
    stats_.reserved_bytes -= size;
    ++stats_.backend_frees;
  }
  cached_.clear();
}

void* BlockCache::Allocate(std::size_t bytes) {
  const std::size_t size = RoundSize(bytes);
  if (size == 0) return nullptr;
  std::lock_guard<std::mutex> l(mu_);
  if (void* p = TakeCachedLocked(size)) return p;
  if (!pending_.empty()) {
    ++stats_.syncs;
    if (backend_.sync()) {
      for (auto& [p, s] : pending_) cached_.emplace(s, p);
      pending_.clear();
      if (void* p = TakeCachedLocked(size)) return p;
    }
  }
  void* p = backend_.alloc(size);
  if (!p && !cached_.empty()) {
    // Out of memory: give the cache back (cached blocks are idle) and try
    // once more.
    ReleaseCachedLocked();
    p = backend_.alloc(size);
  }
  if (!p) return nullptr;
  ++stats_.backend_allocs;
  stats_.reserved_bytes += size;
  if (stats_.reserved_bytes > stats_.peak_reserved_bytes) stats_.peak_reserved_bytes = stats_.reserved_bytes;
  stats_.in_use_bytes += size;
  in_use_[p] = size;
  return p;
}

bool BlockCache::Free(void* p) { return Release(p, false); }
bool BlockCache::FreeReady(void* p) { return Release(p, true); }

bool BlockCache::Release(void* p, bool ready) {
  if (!p) return false;
  std::lock_guard<std::mutex> l(mu_);
  auto it = in_use_.find(p);
  if (it == in_use_.end()) return false;
  if (ready) {
    cached_.emplace(it->second, p);
  } else {
    pending_.emplace_back(p, it->second);
  }
  stats_.in_use_bytes -= it->second;
  in_use_.erase(it);
  return true;
}

void BlockCache::ReleaseCached() {
  std::lock_guard<std::mutex> l(mu_);
  ++stats_.syncs;
  if (backend_.sync()) {
    for (auto& [p, s] : pending_) cached_.emplace(s, p);
    pending_.clear();
  }
  ReleaseCachedLocked();
}

BlockCacheStats BlockCache::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  return stats_;
}

}  // namespace kiln::cuda
