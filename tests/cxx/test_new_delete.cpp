// Every replaceable operator new and delete of C++17, as provided by the
// overriding library: blocks come from freeway, aligned forms align, zero-size
// requests are unique, failure runs the new_handler loop, throws
// std::bad_alloc, and the nothrow forms return nullptr.
#include "freeway.h"

#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <set>
#include <string>
#include <vector>

#define CHECK(cond)                                                                              \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      std::fprintf(stderr, "%s:%d: %s: check failed: %s\n", __FILE__, __LINE__, __func__, #cond); \
      std::abort();                                                                              \
    }                                                                                            \
  } while (0)

namespace {

// Keeps the compiler from reasoning about (or removing) an allocation.
void escape(void *p) { __asm__ __volatile__("" : : "g"(p) : "memory"); }

bool from_freeway(const void *p) { return fw_heap_contains(fw_heap_get_default(), p); }

// For looking a block up after it was freed: an address, no longer a pointer.
std::uintptr_t addr(const void *p) {
  std::uintptr_t a = reinterpret_cast<std::uintptr_t>(p);
  __asm__("" : "+r"(a)); // opaque to the compiler's use-after-free analysis
  return a;
}
bool freed(std::uintptr_t a) { return !fw_heap_contains(fw_heap_get_default(), reinterpret_cast<const void *>(a)); }

bool is_aligned(const void *p, std::size_t a) { return reinterpret_cast<std::uintptr_t>(p) % a == 0; }

const std::size_t impossible = SIZE_MAX / 2;

// [new.delete.single]: storage "suitably aligned to represent any object of
// that size": an object's size is a multiple of its alignment, so a small
// block needs no more than the largest power of two dividing its size.
std::size_t fundamental_alignment_for(std::size_t size) {
  std::size_t a = size & (~size + 1);
  return a < __STDCPP_DEFAULT_NEW_ALIGNMENT__ ? a : __STDCPP_DEFAULT_NEW_ALIGNMENT__;
}

// The library that defines the function at address fn.
const char *library_of(const void *fn) {
  Dl_info info{};
  CHECK(dladdr(fn, &info) != 0 && info.dli_fname != nullptr);
  return info.dli_fname;
}

template <class F>
const void *address(F *fn) {
  return reinterpret_cast<const void *>(fn);
}

// Every form this program calls is bound to freeway's definition.
void test_bound_to_freeway() {
  std::string freeway = library_of(address(&fw_malloc));
  const void *forms[] = {
      address<void *(std::size_t)>(&::operator new),
      address<void *(std::size_t)>(&::operator new[]),
      address<void *(std::size_t, const std::nothrow_t &) noexcept>(&::operator new),
      address<void *(std::size_t, const std::nothrow_t &) noexcept>(&::operator new[]),
      address<void *(std::size_t, std::align_val_t)>(&::operator new),
      address<void *(std::size_t, std::align_val_t)>(&::operator new[]),
      address<void *(std::size_t, std::align_val_t, const std::nothrow_t &) noexcept>(&::operator new),
      address<void *(std::size_t, std::align_val_t, const std::nothrow_t &) noexcept>(&::operator new[]),
      address<void(void *) noexcept>(&::operator delete),
      address<void(void *) noexcept>(&::operator delete[]),
      address<void(void *, const std::nothrow_t &) noexcept>(&::operator delete),
      address<void(void *, const std::nothrow_t &) noexcept>(&::operator delete[]),
      address<void(void *, std::size_t) noexcept>(&::operator delete),
      address<void(void *, std::size_t) noexcept>(&::operator delete[]),
      address<void(void *, std::align_val_t) noexcept>(&::operator delete),
      address<void(void *, std::align_val_t) noexcept>(&::operator delete[]),
      address<void(void *, std::align_val_t, const std::nothrow_t &) noexcept>(&::operator delete),
      address<void(void *, std::align_val_t, const std::nothrow_t &) noexcept>(&::operator delete[]),
      address<void(void *, std::size_t, std::align_val_t) noexcept>(&::operator delete),
      address<void(void *, std::size_t, std::align_val_t) noexcept>(&::operator delete[]),
  };
  for (const void *fn : forms)
    CHECK(freeway == library_of(fn));
}

void test_plain_forms() {
  for (std::size_t size : {1u, 7u, 8u, 16u, 24u, 100u, 1000u, 5000u, 100000u, 3000000u}) {
    const bool check_heap = size <= 100000;
    void *a = ::operator new(size);
    void *b = ::operator new[](size);
    void *c = ::operator new(size, std::nothrow);
    void *d = ::operator new[](size, std::nothrow);
    for (void *p : {a, b, c, d}) {
      CHECK(p != nullptr);
      CHECK(is_aligned(p, fundamental_alignment_for(size)));
      CHECK(fw_malloc_usable_size(p) >= size);
      if (size <= 100000) // very large blocks may be kept outside the heap
        CHECK(from_freeway(p));
      std::memset(p, 0x3c, size);
      escape(p);
    }
    std::uintptr_t addrs[] = {addr(a), addr(b), addr(c), addr(d)};
    ::operator delete(a);
    ::operator delete[](b, size);
    ::operator delete(c, std::nothrow);
    ::operator delete[](d, std::nothrow);
    for (std::uintptr_t x : addrs)
      CHECK(!check_heap || freed(x));

    void *e = ::operator new(size);
    std::uintptr_t ea = addr(e);
    ::operator delete(e, size); // sized
    CHECK(!check_heap || freed(ea));
    void *f = ::operator new[](size);
    std::uintptr_t fa = addr(f);
    ::operator delete[](f);
    CHECK(!check_heap || freed(fa));
  }

  // new-expressions go through the same operators.
  int *one = new int(42);
  CHECK(from_freeway(one) && *one == 42);
  delete one;
  auto *arr = new std::uint64_t[1000]();
  CHECK(from_freeway(arr));
  for (int i = 0; i < 1000; i++)
    CHECK(arr[i] == 0);
  delete[] arr;
  std::vector<std::uint64_t> v(12345, 7);
  CHECK(from_freeway(v.data()));
}

void test_zero_size() {
  std::set<void *> seen;
  std::vector<void *> blocks;
  for (int i = 0; i < 100; i++) {
    void *ps[] = {::operator new(0), ::operator new[](0), ::operator new(0, std::nothrow),
                  ::operator new[](0, std::nothrow), ::operator new(0, std::align_val_t(64)),
                  ::operator new(0, std::align_val_t(64), std::nothrow)};
    for (void *p : ps) {
      CHECK(p != nullptr);
      CHECK(seen.insert(p).second); // unique while live
      blocks.push_back(p);
    }
  }
  for (std::size_t i = 0; i < blocks.size(); i += 6) {
    ::operator delete(blocks[i], std::size_t(0));
    ::operator delete[](blocks[i + 1]);
    ::operator delete(blocks[i + 2], std::nothrow);
    ::operator delete[](blocks[i + 3], std::size_t(0));
    CHECK(is_aligned(blocks[i + 4], 64) && is_aligned(blocks[i + 5], 64));
    ::operator delete(blocks[i + 4], std::size_t(0), std::align_val_t(64));
    ::operator delete(blocks[i + 5], std::align_val_t(64), std::nothrow);
  }
}

void test_aligned_forms() {
  for (std::size_t align = 32; align <= 4096; align *= 2) {
    std::align_val_t al{align};
    for (std::size_t size : {std::size_t(1), align / 2, align - 1, align, align + 1, 3 * align, std::size_t(100000)}) {
      void *ps[] = {::operator new(size, al), ::operator new[](size, al),
                    ::operator new(size, al, std::nothrow), ::operator new[](size, al, std::nothrow)};
      for (void *p : ps) {
        CHECK(p != nullptr);
        CHECK(is_aligned(p, align));
        CHECK(fw_malloc_usable_size(p) >= size);
        CHECK(from_freeway(p));
        std::memset(p, 0x77, size);
        escape(p);
      }
      std::uintptr_t addrs[] = {addr(ps[0]), addr(ps[1]), addr(ps[2]), addr(ps[3])};
      ::operator delete(ps[0], al);
      ::operator delete[](ps[1], size, al);
      ::operator delete(ps[2], al, std::nothrow);
      ::operator delete[](ps[3], al, std::nothrow);
      for (std::uintptr_t x : addrs)
        CHECK(freed(x));
      void *q = ::operator new(size, al);
      std::uintptr_t qa = addr(q);
      ::operator delete(q, size, al);
      CHECK(freed(qa));
      q = ::operator new[](size, al);
      qa = addr(q);
      ::operator delete[](q, al);
      CHECK(freed(qa));
    }
  }
  // Larger alignments too.
  for (std::size_t align = 8192; align <= (std::size_t(1) << 20); align *= 4) {
    void *p = ::operator new(align + 8, std::align_val_t(align));
    CHECK(is_aligned(p, align) && fw_malloc_usable_size(p) >= align + 8);
    ::operator delete(p, align + 8, std::align_val_t(align));
  }

  // Over-aligned new-expressions pick the aligned operators.
  struct alignas(256) wide {
    unsigned char bytes[512];
  };
  wide *w = new wide();
  CHECK(is_aligned(w, 256) && from_freeway(w));
  delete w;
  wide *ws = new wide[9];
  CHECK(is_aligned(ws, 256));
  delete[] ws;
}

void test_null_deletes() {
  ::operator delete(nullptr);
  ::operator delete[](nullptr);
  ::operator delete(nullptr, std::nothrow);
  ::operator delete[](nullptr, std::nothrow);
  ::operator delete(nullptr, std::size_t(16));
  ::operator delete[](nullptr, std::size_t(16));
  ::operator delete(nullptr, std::align_val_t(64));
  ::operator delete[](nullptr, std::align_val_t(64));
  ::operator delete(nullptr, std::align_val_t(64), std::nothrow);
  ::operator delete[](nullptr, std::align_val_t(64), std::nothrow);
  ::operator delete(nullptr, std::size_t(16), std::align_val_t(64));
  ::operator delete[](nullptr, std::size_t(16), std::align_val_t(64));
}

// ---- failure ---------------------------------------------------------------
int handler_calls;
int handler_budget;

// Gives up (uninstalls itself) after handler_budget calls.
void counting_handler() {
  handler_calls++;
  if (handler_calls >= handler_budget)
    std::set_new_handler(nullptr);
}

struct special_bad_alloc : std::bad_alloc {
  const char *what() const noexcept override { return "special"; }
};

void throwing_handler() {
  handler_calls++;
  throw special_bad_alloc();
}

template <class F>
bool throws_bad_alloc(F f) {
  try {
    f();
  } catch (const std::bad_alloc &) {
    return true;
  }
  return false;
}

// Runs each throwing form of operator new on an impossible size.
template <class Check>
void each_throwing_form(Check check) {
  check([] { escape(::operator new(impossible)); });
  check([] { escape(::operator new[](impossible)); });
  check([] { escape(::operator new(impossible, std::align_val_t(64))); });
  check([] { escape(::operator new[](impossible, std::align_val_t(4096))); });
}

void *nothrow_forms(int which) {
  switch (which) {
  case 0:
    return ::operator new(impossible, std::nothrow);
  case 1:
    return ::operator new[](impossible, std::nothrow);
  case 2:
    return ::operator new(impossible, std::align_val_t(64), std::nothrow);
  default:
    return ::operator new[](impossible, std::align_val_t(4096), std::nothrow);
  }
}

void test_failure() {
  CHECK(std::get_new_handler() == nullptr);

  // No handler: throw, or return nullptr.
  each_throwing_form([](auto f) { CHECK(throws_bad_alloc(f)); });
  for (int i = 0; i < 4; i++)
    CHECK(nothrow_forms(i) == nullptr);

  // The handler is called until it gives up, then std::bad_alloc.
  each_throwing_form([](auto f) {
    handler_calls = 0;
    handler_budget = 3;
    std::set_new_handler(counting_handler);
    CHECK(throws_bad_alloc(f));
    CHECK(handler_calls == 3);
    CHECK(std::get_new_handler() == nullptr);
  });
  // The nothrow forms honour the handler too.
  for (int i = 0; i < 4; i++) {
    handler_calls = 0;
    handler_budget = 5;
    std::set_new_handler(counting_handler);
    CHECK(nothrow_forms(i) == nullptr);
    CHECK(handler_calls == 5);
  }

  // A handler's exception propagates from the throwing forms unchanged, and
  // the nothrow forms turn it into nullptr.
  std::set_new_handler(throwing_handler);
  each_throwing_form([](auto f) {
    handler_calls = 0;
    bool special = false;
    try {
      f();
    } catch (const special_bad_alloc &) {
      special = true;
    }
    CHECK(special && handler_calls == 1);
  });
  for (int i = 0; i < 4; i++) {
    handler_calls = 0;
    CHECK(nothrow_forms(i) == nullptr);
    CHECK(handler_calls == 1);
  }
  std::set_new_handler(nullptr);

  // A new-expression of an impossible array.
  bool threw = false;
  try {
    volatile std::size_t n = impossible / sizeof(std::uint64_t) - 1;
    auto *p = new std::uint64_t[n];
    escape(p);
    delete[] p;
  } catch (const std::bad_alloc &) {
    threw = true;
  }
  CHECK(threw);

  // After all of that, allocation works as before.
  void *p = ::operator new(64);
  CHECK(from_freeway(p));
  ::operator delete(p, 64);
}

} // namespace

int main() {
  test_bound_to_freeway();
  test_plain_forms();
  test_zero_size();
  test_aligned_forms();
  test_null_deletes();
  test_failure();
  std::printf("operator new/delete tests passed\n");
  return 0;
}
