// Create and destroy objects (seed 004).
//
// A fixed total number of objects of S bytes is created and destroyed,
// split evenly over T threads. Each thread creates a batch of B objects with
// new, then destroys them with delete, until its share is done. An object's
// constructor writes its header and its last byte. With no contention the
// time falls as 1/T up to the number of cores.
//
//   bench_objects --threads 4 --total 10M --size 1k [--batch 64]
#include "bench_common.h"

#include <new>
#include <vector>

namespace {

struct Object {
  uint64_t id;
  size_t size;
  explicit Object(uint64_t i, size_t s) : id(i), size(s) {
    reinterpret_cast<unsigned char *>(this)[s - 1] = static_cast<unsigned char>(i);
  }
  unsigned char last() const { return reinterpret_cast<const unsigned char *>(this)[size - 1]; }

  static Object *create(uint64_t id, size_t size) { return new (::operator new(size)) Object(id, size); }
  static void destroy(Object *o) {
    o->~Object();
    ::operator delete(static_cast<void *>(o));
  }
};

}  // namespace

int main(int argc, char **argv) {
  int threads = static_cast<int>(bench_arg_count(argc, argv, "threads", 1));
  long long total = bench_arg_count(argc, argv, "total", 1000000);
  size_t size = bench_arg_size(argc, argv, "size", 128);
  size_t batch = static_cast<size_t>(bench_arg_count(argc, argv, "batch", 64));
  if (threads < 1 || total < 0 || size < sizeof(Object) || batch < 1) bench_die("bad arguments");

  bench_cpu_t d = bench_run_team(threads, [&](int t) {
    long long share = total / threads + (t < total % threads ? 1 : 0);
    std::vector<Object *> held(batch);
    uint64_t sum = 0;
    bench_start_wait();
    for (long long done = 0; done < share;) {
      size_t n = static_cast<size_t>(share - done) < batch ? static_cast<size_t>(share - done) : batch;
      for (size_t i = 0; i < n; i++) held[i] = Object::create(static_cast<uint64_t>(done) + i, size);
      for (size_t i = 0; i < n; i++) {
        sum += held[i]->last() + held[i]->id;
        Object::destroy(held[i]);
      }
      done += static_cast<long long>(n);
    }
    return sum;
  });

  bench_json_t j;
  bench_json_begin(&j, "objects");
  bench_json_int(&j, "threads", threads);
  bench_json_int(&j, "total", total);
  bench_json_int(&j, "size", static_cast<long long>(size));
  bench_json_int(&j, "batch", static_cast<long long>(batch));
  bench_json_cpu(&j, d);
  bench_json_end(&j);
  return 0;
}
