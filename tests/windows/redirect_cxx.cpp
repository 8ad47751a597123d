// redirect_cxx.cpp — operator new and delete of the C++ runtime linked into
// the test program: they call the C runtime's malloc and free, which
// freeway-redirect.dll has redirected.
#include <new>

extern "C" void *fwt_cxx_new(void) { return new int[4]; }
extern "C" void fwt_cxx_delete(void *p) { delete[] static_cast<int *>(p); }
