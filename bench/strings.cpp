// String churn (seed 003).
//
// Each thread assigns a freshly formatted integer to a std::string N times.
// The text is wider than the small-string buffer, so every assignment
// allocates the new text and frees the old one: one malloc and one free per
// iteration, as with reference-counted strings released on reassignment.
//
//   bench_strings --threads 2 --iters 10M [--width 24]
//
// Reports the time and the CPU usage, (user + sys) / (wall x cores).
#include "bench_common.h"

#include <string>
#include <thread>
#include <vector>

namespace {

std::string format_int(long long v, int width) {
  char buf[64];
  int n = std::snprintf(buf, sizeof buf, "%0*lld", width, v);
  if (n < 0) n = 0;
  if (n >= static_cast<int>(sizeof buf)) n = static_cast<int>(sizeof buf) - 1;
  return std::string(buf, static_cast<size_t>(n));
}

}  // namespace

int main(int argc, char **argv) {
  int threads = static_cast<int>(bench_arg_count(argc, argv, "threads", 1));
  long long iters = bench_arg_count(argc, argv, "iters", 1000000);
  int width = static_cast<int>(bench_arg_count(argc, argv, "width", 24));
  if (threads < 1 || iters < 0 || width < 16 || width > 60) bench_die("bad arguments (width must be 16..60)");

  std::vector<uint64_t> sums(static_cast<size_t>(threads) * 8, 0);
  std::vector<std::thread> workers;
  pthread_barrier_init(&bench_start_barrier, nullptr, static_cast<unsigned>(threads) + 1);
  for (int t = 0; t < threads; t++) {
    workers.emplace_back([&, t] {
      std::string s;
      uint64_t sum = 0;
      bench_start_wait();
      for (long long i = 0; i < iters; i++) {
        s = format_int(10000000 + i, width);
        sum += static_cast<unsigned char>(s[s.size() - 1]);
      }
      sums[static_cast<size_t>(t) * 8] = sum + s.size();
    });
  }
  bench_cpu_t start = bench_cpu_now();
  bench_start_wait();
  for (auto &w : workers) w.join();
  bench_cpu_t d = bench_cpu_diff(bench_cpu_now(), start);
  pthread_barrier_destroy(&bench_start_barrier);
  for (auto s : sums) bench_sink += s;

  bench_json_t j;
  bench_json_begin(&j, "strings");
  bench_json_int(&j, "threads", threads);
  bench_json_int(&j, "iters", iters);
  bench_json_int(&j, "width", width);
  bench_json_cpu(&j, d);
  bench_json_end(&j);
  return 0;
}
