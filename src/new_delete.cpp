// The replaceable global operator new and delete (every form of C++17) over
// the fw_* functions. Linked into the overriding flavours of the library only.
// On ELF systems the most used ones, new(size_t), delete(void *), their
// array forms and the sized deletes, are override_cxx.c's, in C with the
// hit inline; this file gives them their failure path (fw_cxx_new_failed).
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

#if FW_CXX_LATE
#include <unwind.h>
#endif

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

#if FW_CXX_LATE
// libfreeway.so does not depend on the C++ runtime: a C program that
// preloads it does not map libstdc++ (about 1.4 MB of resident pages, and
// its start-up). The runtime's entry points the failure paths need are
// looked up in the process when an allocation first fails: a program that
// calls operator new has its C++ runtime loaded by then (libstdc++ and
// libc++abi both export these names). The nothrow forms catch what a
// new_handler throws: their catch clause needs the runtime's personality
// routine and catch functions, which this file defines as hidden
// forwarders to the runtime's own (the failure path fills them in before
// any handler runs, so they are set whenever an exception can reach them).
extern "C" FW_CXX_HIDDEN void *fw_os_symbol(const char *name);
extern "C" FW_CXX_HIDDEN void fw_message(const char *fmt, ...);
extern "C" FW_CXX_HIDDEN __attribute__((noreturn)) void fw_os_abort(void);

typedef _Unwind_Reason_Code fw_personality_fn(int, _Unwind_Action, _Unwind_Exception_Class, struct _Unwind_Exception *,
                                              struct _Unwind_Context *);
struct fw_cxx_runtime {
  std::new_handler (*get_new_handler)() noexcept;
  void (*throw_bad_alloc)();
  fw_personality_fn *personality;
  void *(*begin_catch)(void *) noexcept;
  void (*end_catch)();
  void (*terminate)() noexcept;
  bool loaded;
};
fw_cxx_runtime fw_cxx_rt;

template <typename F> void fw_cxx_lookup(F &f, const char *name) { f = reinterpret_cast<F>(fw_os_symbol(name)); }

void fw_cxx_load() noexcept {
  if (__atomic_load_n(&fw_cxx_rt.loaded, __ATOMIC_ACQUIRE)) return;
  fw_cxx_lookup(fw_cxx_rt.get_new_handler, "_ZSt15get_new_handlerv");
  fw_cxx_lookup(fw_cxx_rt.throw_bad_alloc, "_ZSt17__throw_bad_allocv");
  fw_cxx_lookup(fw_cxx_rt.personality, "__gxx_personality_v0");
  fw_cxx_lookup(fw_cxx_rt.begin_catch, "__cxa_begin_catch");
  fw_cxx_lookup(fw_cxx_rt.end_catch, "__cxa_end_catch");
  fw_cxx_lookup(fw_cxx_rt.terminate, "_ZSt9terminatev");
  __atomic_store_n(&fw_cxx_rt.loaded, true, __ATOMIC_RELEASE);
}

std::new_handler fw_cxx_get_new_handler() noexcept {
  fw_cxx_load();
  return fw_cxx_rt.get_new_handler ? fw_cxx_rt.get_new_handler() : nullptr;
}

// Called for the nothrow forms only once a handler exists, i.e. once the
// runtime is known to be there; a handler that throws and no catch machinery
// to stop it cannot be told from a runtime that is missing.
bool fw_cxx_can_catch() noexcept { return fw_cxx_rt.personality && fw_cxx_rt.begin_catch && fw_cxx_rt.end_catch; }

[[noreturn]] void fw_cxx_throw_bad_alloc() {
  fw_cxx_load();
  if (fw_cxx_rt.throw_bad_alloc) fw_cxx_rt.throw_bad_alloc();
  fw_message("operator new: out of memory, and no C++ runtime in the process to throw std::bad_alloc; aborting\n");
  fw_os_abort();
}
#else
std::new_handler fw_cxx_get_new_handler() noexcept { return std::get_new_handler(); }
bool fw_cxx_can_catch() noexcept { return true; }
[[noreturn]] void fw_cxx_throw_bad_alloc() { throw std::bad_alloc(); }
#endif

FW_CXX_COLD void *fw_cxx_new_fail(std::size_t size, bool array) {
  size = fw_cxx_nonzero(size);
  for (;;) {
    std::new_handler handler = fw_cxx_get_new_handler();
    if (handler == nullptr)
      fw_cxx_throw_bad_alloc();
    handler();
    if (void *p = fw_cxx_try(size, array))
      return p;
  }
}

FW_CXX_COLD void *fw_cxx_new_aligned_fail(std::size_t size, std::size_t alignment, bool array) {
  size = fw_cxx_nonzero(size);
  for (;;) {
    std::new_handler handler = fw_cxx_get_new_handler();
    if (handler == nullptr)
      fw_cxx_throw_bad_alloc();
    handler();
    if (void *p = fw_cxx_try_aligned(size, alignment, array))
      return p;
  }
}

// The nothrow forms return nullptr where the others throw, and stop what a
// new_handler throws (std::bad_alloc, or anything: nothing may leave them).
FW_CXX_COLD void *fw_cxx_new_nothrow_fail(std::size_t size, bool array) noexcept {
  if (fw_cxx_get_new_handler() == nullptr || !fw_cxx_can_catch())
    return nullptr;
  try {
    return fw_cxx_new_fail(size, array);
  } catch (...) {
    return nullptr;
  }
}

FW_CXX_COLD void *fw_cxx_new_aligned_nothrow_fail(std::size_t size, std::size_t alignment, bool array) noexcept {
  if (fw_cxx_get_new_handler() == nullptr || !fw_cxx_can_catch())
    return nullptr;
  try {
    return fw_cxx_new_aligned_fail(size, alignment, array);
  } catch (...) {
    return nullptr;
  }
}

#ifdef _WIN32  // elsewhere override_cxx.c's operator new(size_t) has the hit
inline void *fw_cxx_new(std::size_t size, bool array) {
  void *p = fw_cxx_try(size, array);
  if (fw_cxx_likely(p != nullptr))
    return p;
  return fw_cxx_new_fail(size, array);
}
#endif

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
#ifdef _WIN32
FW_CXX_API void *operator new(std::size_t size) { return fw_cxx_new(size, false); }
FW_CXX_API void *operator new[](std::size_t size) { return fw_cxx_new(size, true); }
#else
// operator new(size_t) and new[](size_t) are override_cxx.c's, in C, with
// the hit inline; their slow path calls this when memory is out.
extern "C" FW_CXX_HIDDEN void *fw_cxx_new_failed(std::size_t size, bool array) {
  return fw_cxx_new_fail(size, array);
}
#endif

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
#ifdef _WIN32  // elsewhere override_cxx.c's, like operator new(size_t)
FW_CXX_API void operator delete(void *p) noexcept { fw_delete_direct(p); }
FW_CXX_API void operator delete[](void *p) noexcept { fw_delete_array_direct(p); }
FW_CXX_API void operator delete(void *p, std::size_t size) noexcept { fw_delete_sized_direct(p, size); }
FW_CXX_API void operator delete[](void *p, std::size_t size) noexcept { fw_delete_array_sized_direct(p, size); }
#endif

FW_CXX_API void operator delete(void *p, const std::nothrow_t &) noexcept { fw_delete_direct(p); }
FW_CXX_API void operator delete[](void *p, const std::nothrow_t &) noexcept { fw_delete_array_direct(p); }

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

#if FW_CXX_LATE
// The forwarders the nothrow forms' catch clauses use (see fw_cxx_load).
// The compiler's own declarations of these names are not hidden, so the
// library's version script (src/libfreeway.map) keeps them local: they
// serve this library's own frames only.
extern "C" {
_Unwind_Reason_Code __gxx_personality_v0(int version, _Unwind_Action actions,
                                                       _Unwind_Exception_Class cls, struct _Unwind_Exception *e,
                                                       struct _Unwind_Context *ctx) {
  return fw_cxx_rt.personality(version, actions, cls, e, ctx);
}
void *__cxa_begin_catch(void *e) noexcept { return fw_cxx_rt.begin_catch(e); }
void __cxa_end_catch() { fw_cxx_rt.end_catch(); }
}
// clang's catch clauses in noexcept functions call std::terminate when
// something escapes them.
namespace std {
void terminate() noexcept {
  if (fw_cxx_rt.terminate) fw_cxx_rt.terminate();
  fw_os_abort();
}
} // namespace std
#endif
