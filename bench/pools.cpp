// Pools of objects (seed 000, "pools of objects").
//
// A pool keeps released objects for reuse. The baseline pool is one free list
// behind one lock; a multi-pool has K sub-pools, each with its own lock, and
// every acquire and every release goes to a sub-pool picked at random. The
// free list is either a std::list of pointers (so the pool itself allocates
// and frees a list node on every release and acquire) or a private intrusive
// list threaded through the free objects (no allocation once warm).
//
// Each thread holds H objects; an operation releases the oldest one and
// acquires a new one, writing into it.
//
//   bench_pools --threads 4 --ops 1000k --subpools 8 --list std|private|fwpool|direct
//               [--objsize 128] [--hold 1]
//
// --list fwpool uses freeway's object pool API (fw_pool_*, with K shards),
// found at run time with dlsym(RTLD_DEFAULT, ...): the program is not linked
// against freeway. Under another allocator the names are absent and the run
// prints a "skipped" result. --list direct calls malloc/free for every
// operation, without a pool, as a reference.
#include "bench_common.h"
#include "freeway.h"

#include <dlfcn.h>

#include <cstring>
#include <list>
#include <mutex>
#include <new>
#include <string>
#include <vector>

namespace {

size_t g_objsize = 128;

void *new_object() {
  void *p = std::malloc(g_objsize);
  if (!p) throw std::bad_alloc();
  return p;
}

// Sub-pool holding free objects in a std::list.
struct alignas(64) StdSubPool {
  std::mutex lock;
  std::list<void *> items;

  void *acquire() {
    {
      std::lock_guard<std::mutex> g(lock);
      if (!items.empty()) {
        void *p = items.front();
        items.pop_front();
        return p;
      }
    }
    return new_object();
  }
  void release(void *p) {
    std::lock_guard<std::mutex> g(lock);
    items.push_back(p);
  }
  void drain() {
    for (void *p : items) std::free(p);
    items.clear();
  }
};

// Sub-pool holding free objects in an intrusive singly linked list.
struct alignas(64) PrivateSubPool {
  struct Node {
    Node *next;
  };
  std::mutex lock;
  Node *head = nullptr;

  void *acquire() {
    {
      std::lock_guard<std::mutex> g(lock);
      if (head) {
        Node *n = head;
        head = n->next;
        return n;
      }
    }
    return new_object();
  }
  void release(void *p) {
    Node *n = static_cast<Node *>(p);
    std::lock_guard<std::mutex> g(lock);
    n->next = head;
    head = n;
  }
  void drain() {
    while (head) {
      Node *n = head;
      head = n->next;
      std::free(n);
    }
  }
};

template <class Sub>
struct MultiPool {
  std::vector<Sub> subs;
  explicit MultiPool(size_t k) : subs(k) {}
  void *acquire(bench_rng_t *r) { return subs[bench_rng_next(r) % subs.size()].acquire(); }
  void release(bench_rng_t *r, void *p) { subs[bench_rng_next(r) % subs.size()].release(p); }
  void fill(size_t per_sub) {
    for (auto &s : subs)
      for (size_t i = 0; i < per_sub; i++) s.release(new_object());
  }
  ~MultiPool() {
    for (auto &s : subs) s.drain();
  }
};

// freeway's object pool, resolved at run time.
struct FwPoolApi {
  decltype(&fw_pool_new) pool_new = nullptr;
  decltype(&fw_pool_alloc) pool_alloc = nullptr;
  decltype(&fw_pool_free) pool_free = nullptr;
  decltype(&fw_pool_destroy) pool_destroy = nullptr;
  bool load() {
    pool_new = reinterpret_cast<decltype(&fw_pool_new)>(dlsym(RTLD_DEFAULT, "fw_pool_new"));
    pool_alloc = reinterpret_cast<decltype(&fw_pool_alloc)>(dlsym(RTLD_DEFAULT, "fw_pool_alloc"));
    pool_free = reinterpret_cast<decltype(&fw_pool_free)>(dlsym(RTLD_DEFAULT, "fw_pool_free"));
    pool_destroy = reinterpret_cast<decltype(&fw_pool_destroy)>(dlsym(RTLD_DEFAULT, "fw_pool_destroy"));
    return pool_new && pool_alloc && pool_free && pool_destroy;
  }
};

struct FwPool {
  const FwPoolApi &api;
  fw_pool_t *pool;
  FwPool(const FwPoolApi &a, size_t shards) : api(a) {
    fw_pool_options_t opt;
    std::memset(&opt, 0, sizeof opt);
    opt.size = sizeof opt;
    opt.shards = static_cast<unsigned>(shards);
    pool = api.pool_new(g_objsize, 16, &opt);
    if (!pool) bench_die("fw_pool_new failed");
  }
  void *acquire(bench_rng_t *) {
    void *p = api.pool_alloc(pool);
    if (!p) throw std::bad_alloc();
    return p;
  }
  void release(bench_rng_t *, void *p) { api.pool_free(pool, p); }
  ~FwPool() { api.pool_destroy(pool); }
};

struct DirectPool {
  void *acquire(bench_rng_t *) { return new_object(); }
  void release(bench_rng_t *, void *p) { std::free(p); }
};

struct Config {
  int threads;
  long long ops;
  size_t hold;
  uint64_t seed;
};

template <class Pool>
bench_cpu_t run(Pool &pool, const Config &c) {
  return bench_run_team(c.threads, [&](int t) {
    bench_rng_t rng;
    bench_rng_seed(&rng, c.seed + static_cast<uint64_t>(t) * 31337u);
    std::vector<unsigned char *> held(c.hold);
    bench_start_wait();
    for (auto &h : held) h = static_cast<unsigned char *>(pool.acquire(&rng));
    uint64_t sum = 0;
    size_t oldest = 0;
    for (long long i = 0; i < c.ops; i++) {
      unsigned char *p = held[oldest];
      sum += p[g_objsize - 1];
      pool.release(&rng, p);
      p = static_cast<unsigned char *>(pool.acquire(&rng));
      p[sizeof(void *)] = static_cast<unsigned char>(i);
      p[g_objsize - 1] = static_cast<unsigned char>(t);
      held[oldest] = p;
      if (++oldest == held.size()) oldest = 0;
    }
    for (auto h : held) pool.release(&rng, h);
    return sum;
  });
}

void report(const char *list, const Config &c, size_t subpools, const bench_cpu_t *d, const char *skipped) {
  bench_json_t j;
  bench_json_begin(&j, "pools");
  bench_json_str(&j, "list", list);
  bench_json_int(&j, "threads", c.threads);
  bench_json_int(&j, "ops", c.ops);
  bench_json_int(&j, "subpools", static_cast<long long>(subpools));
  bench_json_int(&j, "objsize", static_cast<long long>(g_objsize));
  bench_json_int(&j, "hold", static_cast<long long>(c.hold));
  if (d) bench_json_cpu(&j, *d);
  if (skipped) bench_json_str(&j, "skipped", skipped);
  bench_json_end(&j);
}

}  // namespace

int main(int argc, char **argv) {
  Config c;
  c.threads = static_cast<int>(bench_arg_count(argc, argv, "threads", 4));
  c.ops = bench_arg_count(argc, argv, "ops", 100000);
  c.hold = bench_arg_size(argc, argv, "hold", 1);
  c.seed = static_cast<uint64_t>(bench_arg_count(argc, argv, "seed", 1));
  size_t subpools = bench_arg_size(argc, argv, "subpools", 1);
  g_objsize = bench_arg_size(argc, argv, "objsize", 128);
  std::string list = bench_arg_str(argc, argv, "list", "std");
  if (c.threads < 1 || c.hold < 1 || subpools < 1 || g_objsize < 2 * sizeof(void *)) bench_die("bad arguments");

  bench_cpu_t d;
  // Each sub-pool starts with enough objects for its share of the threads.
  size_t per_sub = (static_cast<size_t>(c.threads) * c.hold * 2) / subpools + 4;
  if (list == "std") {
    MultiPool<StdSubPool> pool(subpools);
    pool.fill(per_sub);
    d = run(pool, c);
  } else if (list == "private") {
    MultiPool<PrivateSubPool> pool(subpools);
    pool.fill(per_sub);
    d = run(pool, c);
  } else if (list == "direct") {
    DirectPool pool;
    d = run(pool, c);
  } else if (list == "fwpool") {
    FwPoolApi api;
    if (!api.load()) {
      report(list.c_str(), c, subpools, nullptr, "fw_pool_* not found: allocator has no object pool API");
      return 0;
    }
    FwPool pool(api, subpools);
    d = run(pool, c);
  } else {
    bench_die("unknown --list %s", list.c_str());
  }
  report(list.c_str(), c, subpools, &d, nullptr);
  return 0;
}
