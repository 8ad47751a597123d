/* override_cxx.c — the common operators new and delete, under their C++
 * names, in C: operator new(size_t) and delete(void *), their array forms,
 * and the sized deletes the compiler emits when it knows the type. Each
 * holds the hit itself, as malloc and free do (override.c). Defined in
 * new_delete.cpp, operator new was a frame around a call of fw_new_direct
 * (push, call, test for NULL, pop) and delete a jump to fw_delete_direct:
 * 56.2 ms against malloc/free's 46.5 for the same 4 million blocks of
 * 128 B in batches of 64 (user time, medians of 11 alternating runs).
 *
 * Only a throwing new's failure goes to C++: new_delete.cpp's
 * fw_cxx_new_failed runs the new_handler loop and throws std::bad_alloc
 * through fw_new_slow_throwing's frame (this file is built with
 * -fexceptions so that its frames unwind). The file is an object of its own
 * so that a C program linked with libfreeway.a, which never names these
 * operators, does not pull in new_delete.cpp and with it the C++ runtime.
 *
 * The names are those of the Itanium C++ ABI (Linux and the other ELF
 * systems); Windows keeps new_delete.cpp's definitions, whose names carry a
 * prefix there. The rarer forms (nothrow, aligned) stay in new_delete.cpp. */
#include "fast.h"
#include "check.h"

#if !defined(_WIN32)
#ifdef __LP64__
#define FW_CXX_SIZE "m" /* size_t is unsigned long */
_Static_assert(_Generic((size_t)0, unsigned long: 1, default: 0), "size_t mangles as m");
#else
#define FW_CXX_SIZE "j" /* size_t is unsigned int */
_Static_assert(_Generic((size_t)0, unsigned int: 1, default: 0), "size_t mangles as j");
#endif

FW_HIDDEN void *fw_cxx_new_failed(size_t size, bool array);  /* new_delete.cpp */

static FW_NOINLINE FW_COLD void *fw_new_slow_throwing(size_t size, unsigned form) {
  void *p = fw_new_miss(size, form);
  if (fw_likely(p != NULL)) return p;
  return fw_cxx_new_failed(size, form == FW_FORM_NEW_ARRAY);
}

#define FW_CXX_EXPORT __attribute__((visibility("default")))
#define FW_CXX_NEW(name, label, form)                                              \
  FW_CXX_EXPORT void *name(size_t size) __asm__(label);                            \
  void *name(size_t size) { FW_NEW_BODY(size, fw_new_slow_throwing, form) }
FW_CXX_NEW(fw_cxx_operator_new, "_Znw" FW_CXX_SIZE, FW_FORM_NEW)
FW_CXX_NEW(fw_cxx_operator_new_array, "_Zna" FW_CXX_SIZE, FW_FORM_NEW_ARRAY)

/* The free's fast path reads the pointer's slice descriptor before anything
 * has validated it (FW_PROBING, as free's). */
#define FW_CXX_DELETE(name, label, params, how, size)                              \
  FW_CXX_EXPORT void name params __asm__(label);                                   \
  FW_PROBING void name params { FW_DELETE_BODY(how, size, 0) }
FW_CXX_DELETE(fw_cxx_operator_delete, "_ZdlPv", (void *p), FW_FORM_NEW, 0)
FW_CXX_DELETE(fw_cxx_operator_delete_array, "_ZdaPv", (void *p), FW_FORM_NEW_ARRAY, 0)
FW_CXX_DELETE(fw_cxx_operator_delete_sized, "_ZdlPv" FW_CXX_SIZE, (void *p, size_t n),
              FW_FORM_NEW | FW_HOW_SIZED, n)
FW_CXX_DELETE(fw_cxx_operator_delete_array_sized, "_ZdaPv" FW_CXX_SIZE, (void *p, size_t n),
              FW_FORM_NEW_ARRAY | FW_HOW_SIZED, n)
#endif
