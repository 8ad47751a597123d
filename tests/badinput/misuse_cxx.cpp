// misuse_cxx.cpp — the bad-input cases that need C++: operator delete told
// the wrong size or alignment, and new/delete/free mismatches. misuse.c
// runs them and owns the lines the runner reads and the checks afterwards.
//
// The operators are called through volatile pointers: a new-expression, or
// a direct call the compiler can see, may be paired up and removed, and the
// misuse with it. Built with -fsized-deallocation, which clang needs to
// declare operator delete(void *, std::size_t).
#include <cstddef>
#include <new>

extern "C" {
void fwt_cxx_misuse(const char *what, const void *p);
void fwt_cxx_mark(const char *step);
void fwt_cxx_owned(const void *p, std::size_t n);
void fwt_cxx_fresh(std::size_t n);
void fwt_cxx_free(void *p);

void cxx_delete_sized_wrong(void);
void cxx_delete_aligned_of_plain_new(void);
void cxx_delete_of_new_array(void);
void cxx_delete_array_of_new(void);
void cxx_free_of_new(void);
}

namespace {

void *(*volatile op_new)(std::size_t) = ::operator new;
void *(*volatile op_new_array)(std::size_t) = ::operator new[];
void (*volatile op_delete)(void *) noexcept = ::operator delete;
void (*volatile op_delete_array)(void *) noexcept = ::operator delete[];
void (*volatile op_delete_sized)(void *, std::size_t) noexcept = ::operator delete;
void (*volatile op_delete_aligned)(void *, std::align_val_t) noexcept = ::operator delete;

constexpr std::size_t N = 100;

} // namespace

// Valid sizes for a sized delete run from the size asked of new to the
// usable size; 40 is below both.
void cxx_delete_sized_wrong(void) {
  void *p = op_new(N);
  fwt_cxx_owned(p, N);
  fwt_cxx_misuse("operator delete(p, 40) of a 100-byte operator new", p);
  op_delete_sized(p, 40);
  fwt_cxx_mark("delete");
  fwt_cxx_fresh(N);
  fwt_cxx_fresh(40);
}

// The block may happen to be 64-byte aligned: what matters is that it was
// not allocated with an alignment.
void cxx_delete_aligned_of_plain_new(void) {
  void *p = op_new(N);
  fwt_cxx_owned(p, N);
  fwt_cxx_misuse("operator delete(p, align_val_t(64)) of an operator new without alignment", p);
  op_delete_aligned(p, std::align_val_t(64));
  fwt_cxx_mark("delete");
  fwt_cxx_fresh(N);
}

void cxx_delete_of_new_array(void) {
  void *p = op_new_array(N);
  fwt_cxx_owned(p, N);
  fwt_cxx_misuse("operator delete of an operator new[]", p);
  op_delete(p);
  fwt_cxx_mark("delete");
  fwt_cxx_fresh(N);
}

void cxx_delete_array_of_new(void) {
  void *p = op_new(N);
  fwt_cxx_owned(p, N);
  fwt_cxx_misuse("operator delete[] of an operator new", p);
  op_delete_array(p);
  fwt_cxx_mark("delete");
  fwt_cxx_fresh(N);
}

void cxx_free_of_new(void) {
  void *p = op_new(N);
  fwt_cxx_owned(p, N);
  fwt_cxx_misuse("free of an operator new", p);
  fwt_cxx_free(p);
  fwt_cxx_mark("free");
  fwt_cxx_fresh(N);
}
