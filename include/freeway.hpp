// freeway.hpp — C++17 adapters over the C API of freeway.h (header only).
//
//   fw::allocator<T>       a standard Allocator over the default heap or a given fw_heap_t
//   fw::pool_allocator<T>  a standard Allocator for node containers: single objects
//                          come from a process-wide fw_pool_t per (size, alignment)
//   fw::free_list<T>       a one-thread LIFO of recycled T objects over such a pool
//   fw::heap               owns an fw_heap_t (fw_heap_destroy on scope exit)
//   fw::pool<T>            owns an fw_pool_t of T (fw_pool_destroy on scope exit)
//
// See docs/pools.md for usage.
#ifndef FREEWAY_HPP
#define FREEWAY_HPP

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>
#include <new>
#include <type_traits>
#include <utility>

#include "freeway.h"

namespace fw {

namespace detail {

// Blocks from fw_malloc are aligned for any fundamental type.
inline constexpr std::size_t malloc_alignment = alignof(std::max_align_t);

[[noreturn]] inline void throw_bad_alloc() { throw std::bad_alloc(); }

template <class T>
inline std::size_t array_bytes(std::size_t n) {
  if (n > std::numeric_limits<std::size_t>::max() / sizeof(T))
    throw std::bad_array_new_length();
  return n * sizeof(T);
}

// A block of n * sizeof(T) bytes aligned for T, from heap (or the calling
// thread's default heap when heap is null). Throws std::bad_alloc.
template <class T>
inline T *allocate_array(fw_heap_t *heap, std::size_t n) {
  std::size_t bytes = array_bytes<T>(n);
  void *p;
  if constexpr (alignof(T) > malloc_alignment) {
    // bytes is a multiple of alignof(T), as fw_aligned_alloc asks.
    p = heap ? fw_heap_malloc_aligned(heap, bytes, alignof(T)) : fw_aligned_alloc(alignof(T), bytes);
  } else {
    p = heap ? fw_heap_malloc(heap, bytes) : fw_malloc(bytes);
  }
  if (p == nullptr)
    throw_bad_alloc();
  return static_cast<T *>(p);
}

// The process-wide pool for objects of (size, alignment), created on first
// use and kept until the process exits. Returns nullptr when no pool can hold
// such objects (too large or too aligned); callers then use fw_malloc.
inline fw_pool_t *shared_pool(std::size_t size, std::size_t alignment) {
  struct entry {
    std::size_t size, alignment;
    fw_pool_t *pool;
    entry *next;
  };
  // Trivially destructible, so usable by containers destroyed at exit.
  static std::mutex lock;
  static entry *entries = nullptr;
  std::lock_guard<std::mutex> guard(lock);
  for (entry *e = entries; e != nullptr; e = e->next)
    if (e->size == size && e->alignment == alignment)
      return e->pool;
  fw_pool_t *pool = fw_pool_new(size, alignment, nullptr);
  if (pool == nullptr && errno != EINVAL)
    throw_bad_alloc();
  void *mem = fw_malloc(sizeof(entry));
  if (mem == nullptr) {
    fw_pool_destroy(pool);
    throw_bad_alloc();
  }
  entries = ::new (mem) entry{size, alignment, pool, entries};
  return pool;
}

} // namespace detail

// ---- fw::allocator ---------------------------------------------------------
// Allocates from a given heap, or from the calling thread's default heap when
// default-constructed. Two allocators compare equal iff they use the same heap
// (all default-heap allocators are equal). Memory is returned with fw_free,
// so it may be deallocated from any thread; allocating from a given heap is
// for the thread that created it (see fw_heap_new).
template <class T>
class allocator {
public:
  using value_type = T;
  using size_type = std::size_t;
  using difference_type = std::ptrdiff_t;
  using propagate_on_container_copy_assignment = std::true_type;
  using propagate_on_container_move_assignment = std::true_type;
  using propagate_on_container_swap = std::true_type;
  using is_always_equal = std::false_type;

  template <class U>
  struct rebind {
    using other = allocator<U>;
  };

  constexpr allocator() noexcept = default;
  constexpr explicit allocator(fw_heap_t *heap) noexcept : heap_(heap) {}
  template <class U>
  constexpr allocator(const allocator<U> &other) noexcept : heap_(other.heap()) {}

  [[nodiscard]] T *allocate(std::size_t n) { return detail::allocate_array<T>(heap_, n); }
  void deallocate(T *p, std::size_t) noexcept { fw_free(p); }

  constexpr std::size_t max_size() const noexcept {
    return std::numeric_limits<std::size_t>::max() / sizeof(T);
  }
  constexpr fw_heap_t *heap() const noexcept { return heap_; }

private:
  fw_heap_t *heap_ = nullptr;
};

template <class T, class U>
constexpr bool operator==(const allocator<T> &a, const allocator<U> &b) noexcept {
  return a.heap() == b.heap();
}
template <class T, class U>
constexpr bool operator!=(const allocator<T> &a, const allocator<U> &b) noexcept {
  return !(a == b);
}

// ---- fw::pool_allocator ----------------------------------------------------
// For node containers (std::list, std::map, std::set, std::unordered_map...):
// every allocation of a single object comes from the shared pool of its
// (size, alignment), which per-thread caches make nearly free; arrays
// (n > 1, e.g. hash bucket arrays) come from fw_malloc. Stateless: all
// pool_allocators compare equal, and memory may be freed by any thread.
template <class T>
class pool_allocator {
public:
  using value_type = T;
  using size_type = std::size_t;
  using difference_type = std::ptrdiff_t;
  using propagate_on_container_copy_assignment = std::false_type;
  using propagate_on_container_move_assignment = std::true_type;
  using propagate_on_container_swap = std::false_type;
  using is_always_equal = std::true_type;

  template <class U>
  struct rebind {
    using other = pool_allocator<U>;
  };

  constexpr pool_allocator() noexcept = default;
  template <class U>
  constexpr pool_allocator(const pool_allocator<U> &) noexcept {}

  [[nodiscard]] T *allocate(std::size_t n) {
    fw_pool_t *p = n == 1 ? pool() : nullptr;
    if (p == nullptr)
      return detail::allocate_array<T>(nullptr, n);
    void *obj = fw_pool_alloc(p);
    if (obj == nullptr)
      detail::throw_bad_alloc();
    return static_cast<T *>(obj);
  }

  void deallocate(T *obj, std::size_t n) noexcept {
    fw_pool_t *p = n == 1 ? pool() : nullptr;
    if (p != nullptr)
      fw_pool_free(p, obj);
    else
      fw_free(obj);
  }

  constexpr std::size_t max_size() const noexcept {
    return std::numeric_limits<std::size_t>::max() / sizeof(T);
  }

  // The pool single T objects come from (shared by every type of the same
  // size and alignment), or nullptr if T is too large or aligned for pools.
  static fw_pool_t *pool() {
    static fw_pool_t *const shared = detail::shared_pool(sizeof(T), alignof(T));
    return shared;
  }
};

template <class T, class U>
constexpr bool operator==(const pool_allocator<T> &, const pool_allocator<U> &) noexcept {
  return true;
}
template <class T, class U>
constexpr bool operator!=(const pool_allocator<T> &, const pool_allocator<U> &) noexcept {
  return false;
}

// ---- fw::free_list ---------------------------------------------------------
// A LIFO of up to `limit` recycled T objects for one thread, in front of the
// shared pool of T's size. The link lives in the recycled object's storage
// (intrusive), so keeping an object costs nothing. create() constructs in
// recycled or fresh storage; destroy() runs the destructor and keeps the
// storage; objects beyond the limit, and all kept ones when the free_list
// itself is destroyed, go back to the pool. Not thread-safe: one free_list
// per thread (objects may still be created in one and destroyed in another).
template <class T>
class free_list {
  union slot {
    slot *next;
    alignas(T) unsigned char storage[sizeof(T)];
  };

public:
  explicit free_list(std::size_t limit = 64) : pool_(detail::shared_pool(sizeof(slot), alignof(slot))), limit_(limit) {
    if (pool_ == nullptr)
      detail::throw_bad_alloc();
  }
  free_list(const free_list &) = delete;
  free_list &operator=(const free_list &) = delete;
  ~free_list() { trim(0); }

  template <class... Args>
  [[nodiscard]] T *create(Args &&...args) {
    void *mem = take();
    try {
      return ::new (mem) T(std::forward<Args>(args)...);
    } catch (...) {
      give(mem);
      throw;
    }
  }

  void destroy(T *obj) noexcept {
    if (obj == nullptr)
      return;
    obj->~T();
    give(obj);
  }

  // Raw storage for one T, and its return, without construction.
  [[nodiscard]] void *take() {
    if (slot *s = head_) {
      head_ = s->next;
      --count_;
      return s;
    }
    void *mem = fw_pool_alloc(pool_);
    if (mem == nullptr)
      detail::throw_bad_alloc();
    return mem;
  }

  void give(void *mem) noexcept {
    if (count_ >= limit_) {
      fw_pool_free(pool_, mem);
      return;
    }
    slot *s = ::new (mem) slot;
    s->next = head_;
    head_ = s;
    ++count_;
  }

  // Returns kept objects to the pool until at most `keep` remain.
  void trim(std::size_t keep = 0) noexcept {
    while (count_ > keep) {
      slot *s = head_;
      head_ = s->next;
      --count_;
      fw_pool_free(pool_, s);
    }
  }

  std::size_t size() const noexcept { return count_; }
  std::size_t limit() const noexcept { return limit_; }
  fw_pool_t *pool() const noexcept { return pool_; }

private:
  fw_pool_t *pool_;
  slot *head_ = nullptr;
  std::size_t count_ = 0;
  std::size_t limit_;
};

// ---- fw::heap --------------------------------------------------------------
// Owns a heap created by the current thread. Destroying it (or the scope it
// lives in ending) frees every block of the heap at once with
// fw_heap_destroy; release() gives up ownership instead.
class heap {
public:
  heap() : heap_(fw_heap_new()) {
    if (heap_ == nullptr)
      detail::throw_bad_alloc();
  }
  explicit heap(fw_heap_t *adopt) noexcept : heap_(adopt) {}
  heap(heap &&other) noexcept : heap_(std::exchange(other.heap_, nullptr)) {}
  heap &operator=(heap &&other) noexcept {
    if (this != &other) {
      reset();
      heap_ = std::exchange(other.heap_, nullptr);
    }
    return *this;
  }
  heap(const heap &) = delete;
  heap &operator=(const heap &) = delete;
  ~heap() { reset(); }

  fw_heap_t *get() const noexcept { return heap_; }
  explicit operator bool() const noexcept { return heap_ != nullptr; }
  fw_heap_t *release() noexcept { return std::exchange(heap_, nullptr); }
  void reset() noexcept {
    if (heap_ != nullptr)
      fw_heap_destroy(std::exchange(heap_, nullptr));
  }

  // Raw blocks of this heap (nullptr on failure); return them with deallocate().
  [[nodiscard]] void *allocate(std::size_t size) noexcept { return fw_heap_malloc(heap_, size); }
  [[nodiscard]] void *allocate_aligned(std::size_t size, std::size_t alignment) noexcept {
    return fw_heap_malloc_aligned(heap_, size, alignment);
  }
  static void deallocate(void *p) noexcept { fw_free(p); }

  template <class T>
  fw::allocator<T> allocator() const noexcept {
    return fw::allocator<T>(heap_);
  }

  fw_heap_stats_t stats() const noexcept {
    fw_heap_stats_t s{};
    s.size = sizeof s;
    fw_heap_stats(heap_, &s);
    return s;
  }

private:
  fw_heap_t *heap_;
};

// ---- fw::pool --------------------------------------------------------------
// Owns a pool of T. create() constructs a T in a pool object and destroy()
// destructs and frees it. When the fw::pool goes away every object goes with
// it, without its destructor being run: destroy the objects that need it
// first.
template <class T>
class pool {
public:
  explicit pool(const fw_pool_options_t *options = nullptr)
      : pool_(fw_pool_new(sizeof(T), alignof(T), options)) {
    if (pool_ == nullptr)
      detail::throw_bad_alloc();
  }
  pool(pool &&other) noexcept : pool_(std::exchange(other.pool_, nullptr)) {}
  pool &operator=(pool &&other) noexcept {
    if (this != &other) {
      if (pool_ != nullptr)
        fw_pool_destroy(pool_);
      pool_ = std::exchange(other.pool_, nullptr);
    }
    return *this;
  }
  pool(const pool &) = delete;
  pool &operator=(const pool &) = delete;
  ~pool() {
    if (pool_ != nullptr)
      fw_pool_destroy(pool_);
  }

  template <class... Args>
  [[nodiscard]] T *create(Args &&...args) {
    void *mem = fw_pool_alloc(pool_);
    if (mem == nullptr)
      detail::throw_bad_alloc();
    try {
      return ::new (mem) T(std::forward<Args>(args)...);
    } catch (...) {
      fw_pool_free(pool_, mem);
      throw;
    }
  }

  void destroy(T *obj) noexcept {
    if (obj == nullptr)
      return;
    obj->~T();
    fw_pool_free(pool_, obj);
  }

  fw_pool_stats_t stats() const noexcept {
    fw_pool_stats_t s{};
    s.size = sizeof s;
    fw_pool_stats(pool_, &s);
    return s;
  }

  fw_pool_t *get() const noexcept { return pool_; }

private:
  fw_pool_t *pool_;
};

} // namespace fw

#endif // FREEWAY_HPP
