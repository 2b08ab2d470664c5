// The CUDA backend's caching allocator, without CUDA: blocks come from a
// backend (cudaMalloc, cudaHostAlloc; a fake in the tests) and go back to
// this cache when freed, so loading and unloading models does not pay the
// driver's allocation (and its implicit device synchronisation) each time.
//
// A freed block may still be in use by queued device work (a stream that
// has not reached it), so it is first "pending"; pending blocks become
// reusable only after the backend's sync (all device work done), which the
// cache calls when it would otherwise have to allocate. When the backend is
// out of memory, the cache syncs, returns every cached block to it and
// tries once more before reporting failure. (A block the caller knows is
// idle, e.g. a staging buffer released by the callback after its copy, is
// freed with FreeReady: reusable at once, no sync.)
//
// Sizes are rounded (to 512 bytes up to 1 MiB, to 2 MiB above), and a cached
// block is reused for a request of at least half its size (blocks are never
// split), which bounds the waste to 2x in the worst case and keeps the free
// lists short. Thread-safe; the backend is called under the cache's lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kiln::cuda {

struct BlockCacheStats {
  std::uint64_t reserved_bytes = 0;       // held from the backend (in use + cached + pending)
  std::uint64_t in_use_bytes = 0;         // handed out and not freed (rounded sizes)
  std::uint64_t peak_reserved_bytes = 0;
  std::uint64_t backend_allocs = 0;       // backend alloc calls that succeeded
  std::uint64_t backend_frees = 0;
  std::uint64_t reuses = 0;               // requests served from the cache
  std::uint64_t syncs = 0;                // backend sync calls
};

class BlockCache {
 public:
  struct Backend {
    std::function<void*(std::size_t)> alloc;  // null: out of memory
    std::function<void(void*)> free;
    // Returns when no queued work can still use a freed block; false: it
    // could not (pending blocks then stay pending).
    std::function<bool()> sync;
  };
  explicit BlockCache(Backend backend);
  // Returns every block it holds to the backend (after a sync), in use or
  // not: the owner frees the cache only once nothing uses its memory.
  ~BlockCache();
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  // Null when the backend cannot provide the memory even after releasing the
  // cache. Zero bytes get a minimal block (a distinct, valid pointer).
  void* Allocate(std::size_t bytes);
  // false: p did not come from this cache (or was freed already).
  bool Free(void* p);
  // Like Free, for a block no queued work uses any more (the caller knows:
  // e.g. a stream callback after the copy that read it): reusable at once,
  // no sync needed. Makes no backend call, so it may run on a CUDA callback.
  bool FreeReady(void* p);
  // Syncs and returns every cached (not in use) block to the backend.
  void ReleaseCached();
  BlockCacheStats stats() const;

  static std::size_t RoundSize(std::size_t bytes);

 private:
  void* TakeCachedLocked(std::size_t size);
  bool Release(void* p, bool ready);
  void ReleaseCachedLocked();

  Backend backend_;
  mutable std::mutex mu_;
  std::multimap<std::size_t, void*> cached_;           // reusable now, by size
  std::vector<std::pair<void*, std::size_t>> pending_;  // freed, reusable after a sync
  std::unordered_map<void*, std::size_t> in_use_;
  BlockCacheStats stats_;
};

}  // namespace kiln::cuda
