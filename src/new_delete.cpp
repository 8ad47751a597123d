// The replaceable global operator new and delete (every form of C++17) over
// the fw_* functions. Linked into the overriding flavours of the library only.
//
// Semantics follow [new.delete]: a failed allocation calls the installed
// std::new_handler and retries, for as long as there is one; with none, the
// throwing forms throw std::bad_alloc and the nothrow forms return nullptr
// (they also run the handler loop, and catch std::bad_alloc thrown by it).
// A request for 0 bytes yields a unique non-null pointer. Each operator tries
// the allocator inline and leaves every failure to a cold out-of-line loop.
#include <cstddef>
#include <new>

#include "freeway.h"

// fw_malloc and fw_free under hidden names (api.c): called
// directly, and delete jumps straight into the free fast path.
extern "C" {
__attribute__((visibility("hidden"))) void *fw_malloc_direct(std::size_t size) noexcept;
__attribute__((visibility("hidden"))) void fw_free_direct(void *p) noexcept;
}

#define FW_CXX_API __attribute__((visibility("default")))
#define FW_CXX_COLD __attribute__((noinline, cold))
#define fw_cxx_likely(x) __builtin_expect(!!(x), 1)

namespace {

// fw_malloc(0) already hands out a unique block; asking for one byte when it
// fails keeps new(0) non-null even if that ever changed.
inline std::size_t fw_cxx_nonzero(std::size_t size) noexcept { return size | (size == 0); }

FW_CXX_COLD void *fw_cxx_new_fail(std::size_t size) {
  size = fw_cxx_nonzero(size);
  for (;;) {
    std::new_handler handler = std::get_new_handler();
    if (handler == nullptr)
      throw std::bad_alloc();
    handler();
    if (void *p = fw_malloc(size))
      return p;
  }
}

FW_CXX_COLD void *fw_cxx_new_aligned_fail(std::size_t size, std::size_t alignment) {
  size = fw_cxx_nonzero(size);
  for (;;) {
    std::new_handler handler = std::get_new_handler();
    if (handler == nullptr)
      throw std::bad_alloc();
    handler();
    if (void *p = fw_malloc_aligned(size, alignment))
      return p;
  }
}

FW_CXX_COLD void *fw_cxx_new_nothrow_fail(std::size_t size) noexcept {
  try {
    return fw_cxx_new_fail(size);
  } catch (const std::bad_alloc &) {
    return nullptr;
  }
}

FW_CXX_COLD void *fw_cxx_new_aligned_nothrow_fail(std::size_t size, std::size_t alignment) noexcept {
  try {
    return fw_cxx_new_aligned_fail(size, alignment);
  } catch (const std::bad_alloc &) {
    return nullptr;
  }
}

inline void *fw_cxx_new(std::size_t size) {
  void *p = fw_malloc_direct(size);
  if (fw_cxx_likely(p != nullptr))
    return p;
  return fw_cxx_new_fail(size);
}

inline void *fw_cxx_new_aligned(std::size_t size, std::align_val_t alignment) {
  void *p = fw_malloc_aligned(size, static_cast<std::size_t>(alignment));
  if (fw_cxx_likely(p != nullptr))
    return p;
  return fw_cxx_new_aligned_fail(size, static_cast<std::size_t>(alignment));
}

inline void *fw_cxx_new_nothrow(std::size_t size) noexcept {
  void *p = fw_malloc_direct(size);
  if (fw_cxx_likely(p != nullptr))
    return p;
  return fw_cxx_new_nothrow_fail(size);
}

inline void *fw_cxx_new_aligned_nothrow(std::size_t size, std::align_val_t alignment) noexcept {
  void *p = fw_malloc_aligned(size, static_cast<std::size_t>(alignment));
  if (fw_cxx_likely(p != nullptr))
    return p;
  return fw_cxx_new_aligned_nothrow_fail(size, static_cast<std::size_t>(alignment));
}

} // namespace

// ---- new ------------------------------------------------------------------
FW_CXX_API void *operator new(std::size_t size) { return fw_cxx_new(size); }
FW_CXX_API void *operator new[](std::size_t size) { return fw_cxx_new(size); }

FW_CXX_API void *operator new(std::size_t size, const std::nothrow_t &) noexcept {
  return fw_cxx_new_nothrow(size);
}
FW_CXX_API void *operator new[](std::size_t size, const std::nothrow_t &) noexcept {
  return fw_cxx_new_nothrow(size);
}

FW_CXX_API void *operator new(std::size_t size, std::align_val_t alignment) {
  return fw_cxx_new_aligned(size, alignment);
}
FW_CXX_API void *operator new[](std::size_t size, std::align_val_t alignment) {
  return fw_cxx_new_aligned(size, alignment);
}

FW_CXX_API void *operator new(std::size_t size, std::align_val_t alignment, const std::nothrow_t &) noexcept {
  return fw_cxx_new_aligned_nothrow(size, alignment);
}
FW_CXX_API void *operator new[](std::size_t size, std::align_val_t alignment, const std::nothrow_t &) noexcept {
  return fw_cxx_new_aligned_nothrow(size, alignment);
}

// ---- delete ---------------------------------------------------------------
// Every form frees through the block's page, which knows the size and the
// alignment: the sized and aligned forms need nothing else.
FW_CXX_API void operator delete(void *p) noexcept { fw_free_direct(p); }
FW_CXX_API void operator delete[](void *p) noexcept { fw_free_direct(p); }

FW_CXX_API void operator delete(void *p, const std::nothrow_t &) noexcept { fw_free_direct(p); }
FW_CXX_API void operator delete[](void *p, const std::nothrow_t &) noexcept { fw_free_direct(p); }

FW_CXX_API void operator delete(void *p, std::size_t size) noexcept {
  (void)size;
  fw_free_direct(p);
}
FW_CXX_API void operator delete[](void *p, std::size_t size) noexcept {
  (void)size;
  fw_free_direct(p);
}

FW_CXX_API void operator delete(void *p, std::align_val_t alignment) noexcept {
  (void)alignment;
  fw_free_direct(p);
}
FW_CXX_API void operator delete[](void *p, std::align_val_t alignment) noexcept {
  (void)alignment;
  fw_free_direct(p);
}

FW_CXX_API void operator delete(void *p, std::align_val_t alignment, const std::nothrow_t &) noexcept {
  (void)alignment;
  fw_free_direct(p);
}
FW_CXX_API void operator delete[](void *p, std::align_val_t alignment, const std::nothrow_t &) noexcept {
  (void)alignment;
  fw_free_direct(p);
}

FW_CXX_API void operator delete(void *p, std::size_t size, std::align_val_t alignment) noexcept {
  (void)size;
  (void)alignment;
  fw_free_direct(p);
}
FW_CXX_API void operator delete[](void *p, std::size_t size, std::align_val_t alignment) noexcept {
  (void)size;
  (void)alignment;
  fw_free_direct(p);
}
