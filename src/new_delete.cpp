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

// Hidden entries of api.c: called directly, and delete jumps straight into
// the free fast path. In cautious mode they record the form of each new
// (new or new[]) and check each delete against it, with the size and the
// alignment the sized and aligned forms pass.
extern "C" {
#define FW_CXX_HIDDEN __attribute__((visibility("hidden")))
FW_CXX_HIDDEN void *fw_new_direct(std::size_t size) noexcept;
FW_CXX_HIDDEN void *fw_new_array_direct(std::size_t size) noexcept;
FW_CXX_HIDDEN void *fw_new_aligned_direct(std::size_t size, std::size_t alignment) noexcept;
FW_CXX_HIDDEN void *fw_new_array_aligned_direct(std::size_t size, std::size_t alignment) noexcept;
FW_CXX_HIDDEN void fw_delete_direct(void *p) noexcept;
FW_CXX_HIDDEN void fw_delete_array_direct(void *p) noexcept;
FW_CXX_HIDDEN void fw_delete_sized_direct(void *p, std::size_t size) noexcept;
FW_CXX_HIDDEN void fw_delete_array_sized_direct(void *p, std::size_t size) noexcept;
FW_CXX_HIDDEN void fw_delete_aligned_direct(void *p, std::size_t alignment) noexcept;
FW_CXX_HIDDEN void fw_delete_array_aligned_direct(void *p, std::size_t alignment) noexcept;
FW_CXX_HIDDEN void fw_delete_sized_aligned_direct(void *p, std::size_t size, std::size_t alignment) noexcept;
FW_CXX_HIDDEN void fw_delete_array_sized_aligned_direct(void *p, std::size_t size, std::size_t alignment) noexcept;
}

#define FW_CXX_API __attribute__((visibility("default")))
#define FW_CXX_COLD __attribute__((noinline, cold))
#define fw_cxx_likely(x) __builtin_expect(!!(x), 1)

namespace {

// fw_malloc(0) already hands out a unique block; asking for one byte when it
// fails keeps new(0) non-null even if that ever changed.
inline std::size_t fw_cxx_nonzero(std::size_t size) noexcept { return size | (size == 0); }

inline void *fw_cxx_try(std::size_t size, bool array) noexcept {
  return array ? fw_new_array_direct(size) : fw_new_direct(size);
}
inline void *fw_cxx_try_aligned(std::size_t size, std::size_t alignment, bool array) noexcept {
  return array ? fw_new_array_aligned_direct(size, alignment) : fw_new_aligned_direct(size, alignment);
}

FW_CXX_COLD void *fw_cxx_new_fail(std::size_t size, bool array) {
  size = fw_cxx_nonzero(size);
  for (;;) {
    std::new_handler handler = std::get_new_handler();
    if (handler == nullptr)
      throw std::bad_alloc();
    handler();
    if (void *p = fw_cxx_try(size, array))
      return p;
  }
}

FW_CXX_COLD void *fw_cxx_new_aligned_fail(std::size_t size, std::size_t alignment, bool array) {
  size = fw_cxx_nonzero(size);
  for (;;) {
    std::new_handler handler = std::get_new_handler();
    if (handler == nullptr)
      throw std::bad_alloc();
    handler();
    if (void *p = fw_cxx_try_aligned(size, alignment, array))
      return p;
  }
}

FW_CXX_COLD void *fw_cxx_new_nothrow_fail(std::size_t size, bool array) noexcept {
  try {
    return fw_cxx_new_fail(size, array);
  } catch (const std::bad_alloc &) {
    return nullptr;
  }
}

FW_CXX_COLD void *fw_cxx_new_aligned_nothrow_fail(std::size_t size, std::size_t alignment, bool array) noexcept {
  try {
    return fw_cxx_new_aligned_fail(size, alignment, array);
  } catch (const std::bad_alloc &) {
    return nullptr;
  }
}

inline void *fw_cxx_new(std::size_t size, bool array) {
  void *p = fw_cxx_try(size, array);
  if (fw_cxx_likely(p != nullptr))
    return p;
  return fw_cxx_new_fail(size, array);
}

inline void *fw_cxx_new_aligned(std::size_t size, std::align_val_t alignment, bool array) {
  void *p = fw_cxx_try_aligned(size, static_cast<std::size_t>(alignment), array);
  if (fw_cxx_likely(p != nullptr))
    return p;
  return fw_cxx_new_aligned_fail(size, static_cast<std::size_t>(alignment), array);
}

inline void *fw_cxx_new_nothrow(std::size_t size, bool array) noexcept {
  void *p = fw_cxx_try(size, array);
  if (fw_cxx_likely(p != nullptr))
    return p;
  return fw_cxx_new_nothrow_fail(size, array);
}

inline void *fw_cxx_new_aligned_nothrow(std::size_t size, std::align_val_t alignment, bool array) noexcept {
  void *p = fw_cxx_try_aligned(size, static_cast<std::size_t>(alignment), array);
  if (fw_cxx_likely(p != nullptr))
    return p;
  return fw_cxx_new_aligned_nothrow_fail(size, static_cast<std::size_t>(alignment), array);
}

inline std::size_t fw_cxx_align(std::align_val_t alignment) noexcept { return static_cast<std::size_t>(alignment); }

} // namespace

// ---- new ------------------------------------------------------------------
FW_CXX_API void *operator new(std::size_t size) { return fw_cxx_new(size, false); }
FW_CXX_API void *operator new[](std::size_t size) { return fw_cxx_new(size, true); }

FW_CXX_API void *operator new(std::size_t size, const std::nothrow_t &) noexcept {
  return fw_cxx_new_nothrow(size, false);
}
FW_CXX_API void *operator new[](std::size_t size, const std::nothrow_t &) noexcept {
  return fw_cxx_new_nothrow(size, true);
}

FW_CXX_API void *operator new(std::size_t size, std::align_val_t alignment) {
  return fw_cxx_new_aligned(size, alignment, false);
}
FW_CXX_API void *operator new[](std::size_t size, std::align_val_t alignment) {
  return fw_cxx_new_aligned(size, alignment, true);
}

FW_CXX_API void *operator new(std::size_t size, std::align_val_t alignment, const std::nothrow_t &) noexcept {
  return fw_cxx_new_aligned_nothrow(size, alignment, false);
}
FW_CXX_API void *operator new[](std::size_t size, std::align_val_t alignment, const std::nothrow_t &) noexcept {
  return fw_cxx_new_aligned_nothrow(size, alignment, true);
}

// ---- delete ---------------------------------------------------------------
// Every form frees through the block's page, which knows the size and the
// alignment: the sized and aligned forms pass them on for cautious mode only.
FW_CXX_API void operator delete(void *p) noexcept { fw_delete_direct(p); }
FW_CXX_API void operator delete[](void *p) noexcept { fw_delete_array_direct(p); }

FW_CXX_API void operator delete(void *p, const std::nothrow_t &) noexcept { fw_delete_direct(p); }
FW_CXX_API void operator delete[](void *p, const std::nothrow_t &) noexcept { fw_delete_array_direct(p); }

FW_CXX_API void operator delete(void *p, std::size_t size) noexcept { fw_delete_sized_direct(p, size); }
FW_CXX_API void operator delete[](void *p, std::size_t size) noexcept { fw_delete_array_sized_direct(p, size); }

FW_CXX_API void operator delete(void *p, std::align_val_t alignment) noexcept {
  fw_delete_aligned_direct(p, fw_cxx_align(alignment));
}
FW_CXX_API void operator delete[](void *p, std::align_val_t alignment) noexcept {
  fw_delete_array_aligned_direct(p, fw_cxx_align(alignment));
}

FW_CXX_API void operator delete(void *p, std::align_val_t alignment, const std::nothrow_t &) noexcept {
  fw_delete_aligned_direct(p, fw_cxx_align(alignment));
}
FW_CXX_API void operator delete[](void *p, std::align_val_t alignment, const std::nothrow_t &) noexcept {
  fw_delete_array_aligned_direct(p, fw_cxx_align(alignment));
}

FW_CXX_API void operator delete(void *p, std::size_t size, std::align_val_t alignment) noexcept {
  fw_delete_sized_aligned_direct(p, size, fw_cxx_align(alignment));
}
FW_CXX_API void operator delete[](void *p, std::size_t size, std::align_val_t alignment) noexcept {
  fw_delete_array_sized_aligned_direct(p, size, fw_cxx_align(alignment));
}
