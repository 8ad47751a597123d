// The larson pattern (bench/larson.c) in C++, with sized deallocation.
//
// T arrays of S slots, filled by the main thread at the start. Each round
// starts T new std::threads; in round r thread i replaces random slots of
// array (i + r) mod T, so what it frees was allocated by another thread,
// usually one that has exited. A slot holds one of:
//   - raw storage of a random size in [min, max] from ::operator new(size),
//     released with the sized ::operator delete(p, size);
//   - an array of Cell (a class with a destructor) from new Cell[n], released
//     with delete[]: the compiler keeps the count in a cookie before the
//     elements and calls the sized operator delete[] with the whole size;
//   - a Node (fixed size) from new Node, released with delete, which calls
//     the sized operator delete with sizeof(Node).
// An allocator can use the size it is given to skip looking the block up.
//
//   bench_larsonsized --threads 4 --rounds 10 --ops 200k [--slots 1000] [--min 16] [--max 1024]
#include "bench_common.h"

#include <new>
#include <vector>

namespace {

struct Cell {
  uint32_t v;
  Cell() : v(0x9e3779b9u) {}
  ~Cell() { bench_sink += v; }
};

struct Node {
  Node *next;
  uint64_t key;
  double weight;
  unsigned char tag[40];
  explicit Node(uint64_t k) : next(nullptr), key(k), weight(static_cast<double>(k)) { tag[0] = static_cast<unsigned char>(k); }
};

enum Kind : uint8_t { RAW, CELLS, NODE };

struct Slot {
  void *p;
  uint32_t n;  // bytes for RAW, elements for CELLS
  Kind kind;
};

void fill(Slot &s, bench_rng_t &rng, size_t min, size_t max, uint64_t tag) {
  uint64_t x = bench_rng_next(&rng) % 8;
  if (x == 0) {
    s.kind = NODE;
    s.p = new Node(tag);
    s.n = sizeof(Node);
  } else if (x == 1) {
    size_t n = bench_rng_range(&rng, 1, max / sizeof(Cell));
    s.kind = CELLS;
    s.p = new Cell[n];
    s.n = static_cast<uint32_t>(n);
  } else {
    size_t size = bench_rng_range(&rng, min, max);
    unsigned char *q = static_cast<unsigned char *>(::operator new(size));
    q[0] = static_cast<unsigned char>(tag);
    q[size - 1] = static_cast<unsigned char>(size);
    s.kind = RAW;
    s.p = q;
    s.n = static_cast<uint32_t>(size);
  }
}

// Returns 1 if the block did not hold what fill() left in it.
int release(Slot &s) {
  int bad = 0;
  switch (s.kind) {
    case NODE: {
      Node *n = static_cast<Node *>(s.p);
      bad = n->tag[0] != static_cast<unsigned char>(n->key);
      delete n;
      break;
    }
    case CELLS: {
      Cell *c = static_cast<Cell *>(s.p);
      bad = c[s.n - 1].v != 0x9e3779b9u;
      delete[] c;
      break;
    }
    case RAW: {
      unsigned char *q = static_cast<unsigned char *>(s.p);
      bad = q[s.n - 1] != static_cast<unsigned char>(s.n);
      ::operator delete(s.p, static_cast<size_t>(s.n));
      break;
    }
  }
  s.p = nullptr;
  return bad;
}

}  // namespace

int main(int argc, char **argv) {
  int threads = static_cast<int>(bench_arg_count(argc, argv, "threads", 2));
  int rounds = static_cast<int>(bench_arg_count(argc, argv, "rounds", 10));
  long long ops = bench_arg_count(argc, argv, "ops", 100000);
  size_t slots = static_cast<size_t>(bench_arg_count(argc, argv, "slots", 1000));
  size_t min = bench_arg_size(argc, argv, "min", 16);
  size_t max = bench_arg_size(argc, argv, "max", 1024);
  if (threads < 1 || rounds < 1 || ops < 0 || slots < 1 || min < 1 || max < min || max < sizeof(Cell))
    bench_die("bad arguments");

  bench_rng_t rng;
  bench_rng_seed(&rng, 5);
  std::vector<std::vector<Slot>> arrays(static_cast<size_t>(threads), std::vector<Slot>(slots));
  for (auto &arr : arrays)
    for (auto &s : arr) fill(s, rng, min, max, 0);

  std::vector<long long> bad(static_cast<size_t>(threads) * 8, 0);
  bench_cpu_t start = bench_cpu_now();
  for (int r = 0; r < rounds; r++) {
    std::vector<std::thread> team;
    for (int t = 0; t < threads; t++) {
      team.emplace_back([&, t, r] {
        bench_rng_t trng;
        bench_rng_seed(&trng, static_cast<uint64_t>(r) * 1000003u + static_cast<uint64_t>(t));
        std::vector<Slot> &arr = arrays[static_cast<size_t>((t + r) % threads)];
        long long b = 0;
        for (long long i = 0; i < ops; i++) {
          Slot &s = arr[static_cast<size_t>(bench_rng_next(&trng) % slots)];
          b += release(s);
          fill(s, trng, min, max, static_cast<uint64_t>(i));
        }
        bad[static_cast<size_t>(t) * 8] += b;
      });
    }
    for (auto &th : team) th.join();
  }
  bench_cpu_t d = bench_cpu_diff(bench_cpu_now(), start);
  long long total_bad = 0;
  for (auto &arr : arrays)
    for (auto &s : arr) total_bad += release(s);
  for (long long b : bad) total_bad += b;

  bench_json_t j;
  bench_json_begin(&j, "larsonsized");
  bench_json_int(&j, "threads", threads);
  bench_json_int(&j, "rounds", rounds);
  bench_json_int(&j, "ops", ops);
  bench_json_int(&j, "slots", static_cast<long long>(slots));
  bench_json_int(&j, "bad", total_bad);
  bench_json_cpu(&j, d);
  bench_json_num(&j, "mops_per_s", d.wall_ms > 0 ? static_cast<double>(ops) * threads * rounds / d.wall_ms / 1e3 : 0);
  bench_json_end(&j);
  return total_bad ? 1 : 0;
}
