// wintest_cxx.cpp — operator new and delete in a MinGW program linked to
// libfreeway.a (wintest's "static" section): they are freeway's.
#include <cstdint>
#include <new>
#include <string>
#include <vector>
#include "freeway.h"

extern "C" void fwt_cxx_check(int *failures);

namespace {
struct alignas(128) Wide {
  unsigned char bytes[300];
};
void check(bool ok, int *failures) {
  if (!ok) ++*failures;
}
}  // namespace

void fwt_cxx_check(int *failures) {
  int *one = new int(7);
  check(fw_malloc_usable_size(one) >= sizeof(int), failures);
  delete one;
  char *arr = new char[5000];
  check(fw_malloc_usable_size(arr) >= 5000, failures);
  delete[] arr;
  Wide *w = new Wide;
  check((reinterpret_cast<std::uintptr_t>(w) & 127) == 0 && fw_malloc_usable_size(w) >= sizeof(Wide), failures);
  delete w;
  void *nt = ::operator new(64, std::nothrow);
  check(nt != nullptr && fw_malloc_usable_size(nt) >= 64, failures);
  ::operator delete(nt);
  std::vector<std::string> v;
  for (int i = 0; i < 1000; i++) v.push_back(std::string(100 + i % 50, 'x'));
  check(fw_malloc_usable_size(v.data()) >= v.size() * sizeof(std::string), failures);
  check(fw_malloc_usable_size(v[10].data()) >= 110, failures);
}
