// The CUDA backend's caching allocator (src/backends/cuda/block_cache.h),
// against a fake backend that counts calls and can run out of memory: its
// logic needs no GPU, so it runs in every build (sanitizers included).
#include "backends/cuda/block_cache.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <thread>

namespace kiln::cuda {
namespace {

struct FakeBackend {
  std::size_t capacity = std::size_t{1} << 30;  // bytes it can hand out
  std::size_t held = 0;
  std::map<void*, std::size_t> live;
  int allocs = 0, frees = 0, syncs = 0;
  bool sync_ok = true;  // false: the sync fails (e.g. a capture is active)
  std::vector<std::string> log;  // "alloc N", "free N", "sync", in order

  BlockCache::Backend Make() {
    return {[this](std::size_t n) -> void* {
              if (held + n > capacity) {
                log.push_back("oom " + std::to_string(n));
                return nullptr;
              }
              void* p = std::malloc(n);
              live[p] = n;
              held += n;
              ++allocs;
              log.push_back("alloc " + std::to_string(n));
              return p;
            },
            [this](void* p) {
              auto it = live.find(p);
              ASSERT_NE(it, live.end()) << "freed a pointer the backend never gave";
              held -= it->second;
              log.push_back("free " + std::to_string(it->second));
              live.erase(it);
              std::free(p);
              ++frees;
            },
            [this] {
              ++syncs;
              log.push_back("sync");
              return sync_ok;
            }};
  }
};

TEST(CudaBlockCache, RoundsSizes) {
  EXPECT_EQ(BlockCache::RoundSize(0), 512u);
  EXPECT_EQ(BlockCache::RoundSize(1), 512u);
  EXPECT_EQ(BlockCache::RoundSize(512), 512u);
  EXPECT_EQ(BlockCache::RoundSize(513), 1024u);
  EXPECT_EQ(BlockCache::RoundSize(1 << 20), std::size_t{1} << 20);
  EXPECT_EQ(BlockCache::RoundSize((1 << 20) + 1), std::size_t{2} << 20);
  EXPECT_EQ(BlockCache::RoundSize((5 << 20) + 3), std::size_t{6} << 20);
  EXPECT_EQ(BlockCache::RoundSize(SIZE_MAX - 5), 0u);  // cannot be rounded
}

TEST(CudaBlockCache, FreedBlockIsReusedOnlyAfterASync) {
  FakeBackend fb;
  BlockCache cache(fb.Make());
  void* a = cache.Allocate(1000);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(fb.allocs, 1);
  ASSERT_TRUE(cache.Free(a));
  EXPECT_EQ(fb.frees, 0);  // kept, not returned to the driver
  // Queued work may still use `a`: reusing it needs the backend's sync first.
  void* b = cache.Allocate(900);  // same rounded size (1024)
  EXPECT_EQ(b, a);
  EXPECT_EQ(fb.allocs, 1);
  EXPECT_EQ(fb.syncs, 1);
  ASSERT_EQ(fb.log.size(), 2u);
  EXPECT_EQ(fb.log[0], "alloc 1024");
  EXPECT_EQ(fb.log[1], "sync");
  const BlockCacheStats s = cache.stats();
  EXPECT_EQ(s.reuses, 1u);
  EXPECT_EQ(s.in_use_bytes, 1024u);
  EXPECT_EQ(s.reserved_bytes, 1024u);
  EXPECT_TRUE(cache.Free(b));
  EXPECT_FALSE(cache.Free(b));  // twice
  int x = 0;
  EXPECT_FALSE(cache.Free(&x));  // not ours
}

TEST(CudaBlockCache, ReadyBlocksNeedNoSyncAndAFailedSyncKeepsBlocksPending) {
  FakeBackend fb;
  BlockCache cache(fb.Make());
  void* staging = cache.Allocate(4096);
  ASSERT_TRUE(cache.FreeReady(staging));  // e.g. released by the copy's callback
  EXPECT_EQ(cache.Allocate(4000), staging);
  EXPECT_EQ(fb.syncs, 0);
  EXPECT_FALSE(cache.FreeReady(&fb));  // not ours
  // A sync that fails must not make pending blocks reusable.
  ASSERT_TRUE(cache.Free(staging));
  fb.sync_ok = false;
  void* other = cache.Allocate(4000);
  EXPECT_NE(other, staging);
  EXPECT_EQ(fb.syncs, 1);
  EXPECT_EQ(fb.allocs, 2);
  fb.sync_ok = true;
  ASSERT_TRUE(cache.Free(other));
  EXPECT_EQ(cache.Allocate(4000), staging);  // the sync now succeeds: the first pending block
}

TEST(CudaBlockCache, CachedBlocksServeRequestsAtLeastHalfTheirSize) {
  FakeBackend fb;
  BlockCache cache(fb.Make());
  void* big = cache.Allocate(8 << 20);
  ASSERT_TRUE(cache.Free(big));
  // 3 MiB rounds to 4 MiB: half of 8, so the cached 8 MiB block serves it.
  EXPECT_EQ(cache.Allocate(3 << 20), big);
  EXPECT_EQ(fb.allocs, 1);
  ASSERT_TRUE(cache.Free(big));
  // 2 MiB is under half: a new block, not the cached one.
  void* small = cache.Allocate(2 << 20);
  EXPECT_NE(small, big);
  EXPECT_EQ(fb.allocs, 2);
  ASSERT_TRUE(cache.Free(small));
  // The smallest fitting block is taken: with 8 and 6 MiB cached, 5 MiB
  // (rounded to 6) gets the 6 MiB one.
  void* b8 = cache.Allocate(8 << 20);
  void* b6 = cache.Allocate(6 << 20);
  EXPECT_EQ(b8, big);
  ASSERT_TRUE(cache.Free(b8));
  ASSERT_TRUE(cache.Free(b6));
  EXPECT_EQ(cache.Allocate(5 << 20), b6);
  EXPECT_EQ(cache.Allocate(7 << 20), b8);
}

TEST(CudaBlockCache, OutOfMemoryReleasesTheCacheAndRetriesOnce) {
  FakeBackend fb;
  fb.capacity = 10 << 20;
  BlockCache cache(fb.Make());
  void* a = cache.Allocate(4 << 20);
  void* b = cache.Allocate(4 << 20);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(cache.Free(a));
  ASSERT_TRUE(cache.Free(b));
  // 8 MiB: the cached 4 MiB blocks are under half of it, and the backend has
  // only 2 MiB left: sync, give both back, and the retry succeeds.
  void* c = cache.Allocate(8 << 20);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(fb.frees, 2);
  EXPECT_EQ(cache.stats().reserved_bytes, std::uint64_t{8} << 20);
  // Beyond the capacity even with nothing cached: null, no crash.
  EXPECT_EQ(cache.Allocate(4 << 20), nullptr);
  EXPECT_EQ(cache.Allocate(SIZE_MAX - 1), nullptr);
  EXPECT_EQ(cache.stats().reserved_bytes, std::uint64_t{8} << 20);
}

TEST(CudaBlockCache, ZeroBytesGiveDistinctBlocks) {
  FakeBackend fb;
  BlockCache cache(fb.Make());
  void* a = cache.Allocate(0);
  void* b = cache.Allocate(0);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a, b);
}

TEST(CudaBlockCache, ReleaseCachedAndDestructionReturnEverything) {
  FakeBackend fb;
  {
    BlockCache cache(fb.Make());
    void* a = cache.Allocate(100);
    void* b = cache.Allocate(3 << 20);
    void* c = cache.Allocate(5000);
    ASSERT_TRUE(cache.Free(a));
    ASSERT_TRUE(cache.Free(b));
    cache.ReleaseCached();  // a and b go back; c is in use
    EXPECT_EQ(fb.frees, 2);
    EXPECT_EQ(fb.live.size(), 1u);
    EXPECT_EQ(cache.stats().reserved_bytes, 5120u);
    EXPECT_EQ(cache.stats().peak_reserved_bytes, 512u + (4u << 20) + 5120u);
    (void)c;  // still in use at destruction: returned too
  }
  EXPECT_TRUE(fb.live.empty());
  EXPECT_EQ(fb.allocs, fb.frees);
}

TEST(CudaBlockCache, ConcurrentAllocateAndFree) {
  FakeBackend fb;
  std::mutex backend_mu;  // the fake's bookkeeping is not thread-safe; the cache calls it under its lock anyway
  BlockCache::Backend inner = fb.Make();
  BlockCache cache({[&](std::size_t n) {
                      std::lock_guard<std::mutex> l(backend_mu);
                      return inner.alloc(n);
                    },
                    [&](void* p) {
                      std::lock_guard<std::mutex> l(backend_mu);
                      inner.free(p);
                    },
                    [&] {
                      std::lock_guard<std::mutex> l(backend_mu);
                      return inner.sync();
                    }});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&cache, t] {
      std::vector<void*> mine;
      for (int i = 0; i < 200; ++i) {
        void* p = cache.Allocate(static_cast<std::size_t>((i * 37 + t * 11) % 5000));
        ASSERT_NE(p, nullptr);
        static_cast<char*>(p)[0] = static_cast<char>(t);  // the block is ours alone
        mine.push_back(p);
        if (i % 3 == 2) {
          for (void* q : mine) {
            ASSERT_EQ(static_cast<char*>(q)[0], static_cast<char>(t));
            ASSERT_TRUE(cache.Free(q));
          }
          mine.clear();
        }
      }
      for (void* q : mine) ASSERT_TRUE(cache.Free(q));
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(cache.stats().in_use_bytes, 0u);
}

}  // namespace
}  // namespace kiln::cuda
