// The C++ adapters of freeway.hpp: standard containers on fw::allocator and
// fw::pool_allocator (checked against the same operations on std::allocator),
// fw::free_list, fw::heap and fw::pool.
#include "freeway.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#define CHECK(cond)                                                                              \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      std::fprintf(stderr, "%s:%d: %s: check failed: %s\n", __FILE__, __LINE__, __func__, #cond); \
      std::abort();                                                                              \
    }                                                                                            \
  } while (0)

namespace {

template <class T>
bool aligned(const T *p, std::size_t a) {
  return reinterpret_cast<std::uintptr_t>(p) % a == 0;
}

std::size_t pool_live(fw_pool_t *pool) {
  fw_pool_stats_t s{};
  s.size = sizeof s;
  CHECK(fw_pool_stats(pool, &s) == 0);
  return s.objects_live;
}

// A deterministic value sequence.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

struct alignas(64) wide {
  std::uint64_t v[8];
};

template <template <class> class Alloc>
void run_vector() {
  std::vector<int, Alloc<int>> v;
  std::vector<int> ref;
  for (int i = 0; i < 100000; i++) {
    v.push_back(i * 3);
    ref.push_back(i * 3);
  }
  CHECK(std::equal(v.begin(), v.end(), ref.begin(), ref.end()));
  v.erase(v.begin() + 10, v.begin() + 5000);
  ref.erase(ref.begin() + 10, ref.begin() + 5000);
  v.shrink_to_fit();
  CHECK(std::equal(v.begin(), v.end(), ref.begin(), ref.end()));

  // Capacity 1 takes the pool path of pool_allocator, then moves to fw_malloc.
  std::vector<std::uint64_t, Alloc<std::uint64_t>> small;
  small.reserve(1);
  small.push_back(7);
  small.push_back(8);
  CHECK(small.size() == 2 && small[0] == 7 && small[1] == 8);

  std::vector<wide, Alloc<wide>> w(1000);
  CHECK(aligned(w.data(), 64));
  for (std::size_t i = 0; i < w.size(); i++)
    for (int k = 0; k < 8; k++)
      w[i].v[k] = i * 8 + static_cast<std::uint64_t>(k);
  w.resize(3000);
  CHECK(aligned(w.data(), 64));
  for (std::size_t i = 0; i < 1000; i++)
    for (int k = 0; k < 8; k++)
      CHECK(w[i].v[k] == i * 8 + static_cast<std::uint64_t>(k));
}

template <template <class> class Alloc>
void run_list() {
  std::list<std::string, Alloc<std::string>> l;
  std::list<std::string> ref;
  for (int i = 0; i < 20000; i++) {
    std::string s = "item-" + std::to_string(mix(static_cast<std::uint64_t>(i)));
    if (i % 2) {
      l.push_back(s);
      ref.push_back(s);
    } else {
      l.push_front(s);
      ref.push_front(s);
    }
  }
  l.remove_if([](const std::string &s) { return s.back() == '3'; });
  ref.remove_if([](const std::string &s) { return s.back() == '3'; });
  l.sort();
  ref.sort();
  CHECK(std::equal(l.begin(), l.end(), ref.begin(), ref.end()));
  auto copy = l;
  l.clear();
  CHECK(std::equal(copy.begin(), copy.end(), ref.begin(), ref.end()));
}

template <template <class> class Alloc>
void run_map() {
  using value = std::pair<const int, std::string>;
  std::map<int, std::string, std::less<int>, Alloc<value>> m;
  std::map<int, std::string> ref;
  for (int i = 0; i < 30000; i++) {
    int k = static_cast<int>(mix(static_cast<std::uint64_t>(i)) % 10000);
    std::string v(static_cast<std::size_t>(i % 40), static_cast<char>('a' + i % 26));
    m[k] = v;
    ref[k] = v;
    if (i % 5 == 0) {
      m.erase(k / 2);
      ref.erase(k / 2);
    }
  }
  CHECK(m.size() == ref.size());
  CHECK(std::equal(m.begin(), m.end(), ref.begin(), ref.end()));

  std::set<std::uint64_t, std::less<std::uint64_t>, Alloc<std::uint64_t>> s;
  for (std::uint64_t i = 0; i < 5000; i++)
    s.insert(mix(i) % 3000);
  std::set<std::uint64_t> sref;
  for (std::uint64_t i = 0; i < 5000; i++)
    sref.insert(mix(i) % 3000);
  CHECK(std::equal(s.begin(), s.end(), sref.begin(), sref.end()));
}

template <template <class> class Alloc>
void run_unordered_map() {
  using value = std::pair<const std::uint64_t, std::uint64_t>;
  std::unordered_map<std::uint64_t, std::uint64_t, std::hash<std::uint64_t>,
                     std::equal_to<std::uint64_t>, Alloc<value>>
      m;
  std::unordered_map<std::uint64_t, std::uint64_t> ref;
  for (std::uint64_t i = 0; i < 50000; i++) {
    std::uint64_t k = mix(i) % 20000;
    m[k] += i;
    ref[k] += i;
    if (i % 7 == 0) {
      m.erase(mix(k) % 20000);
      ref.erase(mix(k) % 20000);
    }
  }
  CHECK(m.size() == ref.size());
  for (const auto &kv : ref) {
    auto it = m.find(kv.first);
    CHECK(it != m.end() && it->second == kv.second);
  }
  m.rehash(100000);
  for (const auto &kv : ref)
    CHECK(m.at(kv.first) == kv.second);
}

template <template <class> class Alloc>
void run_deque() {
  std::deque<std::uint64_t, Alloc<std::uint64_t>> d;
  std::deque<std::uint64_t> ref;
  for (std::uint64_t i = 0; i < 100000; i++) {
    if (i % 3 == 0) {
      d.push_front(mix(i));
      ref.push_front(mix(i));
    } else {
      d.push_back(mix(i));
      ref.push_back(mix(i));
    }
    if (i % 11 == 0) {
      d.pop_back();
      ref.pop_back();
    }
  }
  CHECK(std::equal(d.begin(), d.end(), ref.begin(), ref.end()));
}

template <template <class> class Alloc>
void run_string() {
  using string = std::basic_string<char, std::char_traits<char>, Alloc<char>>;
  string s;
  std::string ref;
  for (int i = 0; i < 5000; i++) {
    string part(static_cast<std::size_t>(i % 97), static_cast<char>('A' + i % 26));
    s += part;
    ref.append(static_cast<std::size_t>(i % 97), static_cast<char>('A' + i % 26));
  }
  CHECK(s.size() == ref.size() && std::memcmp(s.data(), ref.data(), ref.size()) == 0);
  string copy = s.substr(1000, 50000);
  CHECK(std::memcmp(copy.data(), ref.data() + 1000, 50000) == 0);
  std::vector<string, Alloc<string>> many;
  for (int i = 0; i < 2000; i++)
    many.push_back(string("a string long enough to live on the heap #") + std::to_string(i).c_str());
  for (int i = 0; i < 2000; i++)
    CHECK(many[static_cast<std::size_t>(i)] ==
          (string("a string long enough to live on the heap #") + std::to_string(i).c_str()));
}

template <template <class> class Alloc>
void run_all_containers() {
  run_vector<Alloc>();
  run_list<Alloc>();
  run_map<Alloc>();
  run_unordered_map<Alloc>();
  run_deque<Alloc>();
  run_string<Alloc>();
}

void test_allocator_semantics() {
  fw::allocator<int> a;
  fw::allocator<long> b;
  CHECK(a == b && !(a != b));
  CHECK(a.heap() == nullptr);
  fw::allocator<double> c(a);
  CHECK(c == a);

  int *p = a.allocate(10);
  CHECK(p != nullptr);
  for (int i = 0; i < 10; i++)
    p[i] = i;
  a.deallocate(p, 10);

  bool threw = false;
  try {
    (void)a.allocate(std::numeric_limits<std::size_t>::max() / 2);
  } catch (const std::bad_alloc &) {
    threw = true;
  }
  CHECK(threw);
  threw = false;
  try {
    (void)a.allocate(std::numeric_limits<std::size_t>::max() / sizeof(int) + 2);
  } catch (const std::bad_array_new_length &) {
    threw = true;
  }
  CHECK(threw);

  using traits = std::allocator_traits<fw::allocator<int>>;
  static_assert(std::is_same<traits::rebind_alloc<char>, fw::allocator<char>>::value, "rebind");
  static_assert(std::is_same<fw::pool_allocator<int>::rebind<char>::other, fw::pool_allocator<char>>::value,
                "rebind");
  static_assert(std::allocator_traits<fw::pool_allocator<int>>::is_always_equal::value, "stateless");

  // Over-aligned types, one and many.
  struct alignas(256) big_aligned {
    char c[300];
  };
  fw::allocator<big_aligned> ba;
  for (std::size_t n : {1u, 2u, 7u, 100u}) {
    big_aligned *q = ba.allocate(n);
    CHECK(aligned(q, 256));
    std::memset(static_cast<void *>(q), 0x5a, n * sizeof *q);
    ba.deallocate(q, n);
  }
}

void test_heap_allocator() {
  fw::heap h;
  CHECK(h);
  fw::allocator<int> ha = h.allocator<int>();
  fw::allocator<int> ha2(h.get());
  CHECK(ha == ha2);
  CHECK(ha != fw::allocator<int>());
  {
    fw::heap other;
    CHECK(fw::allocator<int>(other.get()) != ha);
  }
  std::vector<int, fw::allocator<int>> v(ha);
  for (int i = 0; i < 10000; i++)
    v.push_back(i);
  CHECK(fw_heap_contains(h.get(), v.data()));
  CHECK(!fw_heap_contains(fw_heap_get_default(), v.data()));
  std::map<int, int, std::less<int>, fw::allocator<std::pair<const int, int>>> m(
      fw::allocator<std::pair<const int, int>>(h.get()));
  for (int i = 0; i < 1000; i++)
    m[i] = i * i;
  for (int i = 0; i < 1000; i++)
    CHECK(m.at(i) == i * i);
  fw_heap_stats_t s = h.stats();
  CHECK(s.blocks_live >= 1001);

  struct alignas(128) aligned128 {
    int x;
  };
  std::vector<aligned128, fw::allocator<aligned128>> av(h.allocator<aligned128>());
  av.resize(50);
  CHECK(aligned(av.data(), 128));
  CHECK(fw_heap_contains(h.get(), av.data()));

  void *raw = h.allocate(100);
  CHECK(raw != nullptr && fw_heap_contains(h.get(), raw));
  fw::heap::deallocate(raw);
  raw = h.allocate_aligned(100, 512);
  CHECK(raw != nullptr && aligned(static_cast<char *>(raw), 512));
  fw::heap::deallocate(raw);

  // Move-assigning a container moves the heap along with the memory.
  std::vector<int, fw::allocator<int>> moved;
  moved = std::move(v);
  CHECK(moved.get_allocator() == ha && moved.size() == 10000 && moved[9999] == 9999);
  moved.clear();
  moved.shrink_to_fit();
  m.clear();
  av.clear();
  av.shrink_to_fit();

  // Blocks still live when the owner goes away are freed with the heap.
  for (int i = 0; i < 100; i++)
    CHECK(h.allocate(static_cast<std::size_t>(16 + i * 8)) != nullptr);
  fw_heap_t *raw_heap = h.get();
  fw::heap taken = std::move(h);
  CHECK(!h && taken.get() == raw_heap);
  CHECK(taken.stats().blocks_live >= 100);
  taken.reset();
  CHECK(!taken);
  fw::heap adopted(fw_heap_new());
  CHECK(adopted && adopted.allocate(10) != nullptr);
  fw_heap_t *released = adopted.release();
  CHECK(!adopted && released != nullptr);
  fw_heap_destroy(released);
}

struct node_a {
  std::uint64_t a, b, c;
};
struct node_b {
  double x, y, z;
};
struct node_c {
  char bytes[40];
};

void test_pool_allocator() {
  // Types of the same size and alignment share one pool.
  fw_pool_t *pa = fw::pool_allocator<node_a>::pool();
  CHECK(pa != nullptr);
  CHECK(pa == fw::pool_allocator<node_b>::pool());
  CHECK(pa != fw::pool_allocator<node_c>::pool());

  fw::pool_allocator<node_a> alloc;
  std::size_t before = pool_live(pa);
  node_a *one = alloc.allocate(1);
  CHECK(pool_live(pa) == before + 1);
  node_a *many = alloc.allocate(3); // arrays bypass the pool
  CHECK(pool_live(pa) == before + 1);
  one->a = 1;
  many[2].c = 3;
  alloc.deallocate(many, 3);
  alloc.deallocate(one, 1);
  CHECK(pool_live(pa) == before);

  // A type too large for pools falls back to fw_malloc.
  struct huge {
    char bytes[1 << 20];
  };
  CHECK(fw::pool_allocator<huge>::pool() == nullptr);
  fw::pool_allocator<huge> ha;
  huge *h = ha.allocate(1);
  h->bytes[(1 << 20) - 1] = 1;
  ha.deallocate(h, 1);

  // Nodes built by one thread and freed by another.
  using list = std::list<std::uint64_t, fw::pool_allocator<std::uint64_t>>;
  std::vector<list> lists(4);
  std::vector<std::thread> builders;
  for (std::size_t t = 0; t < lists.size(); t++)
    builders.emplace_back([&lists, t] {
      for (std::uint64_t i = 0; i < 50000; i++)
        lists[t].push_back(mix(i + t * 1000000));
    });
  for (auto &th : builders)
    th.join();
  std::vector<std::thread> destroyers;
  for (std::size_t t = 0; t < lists.size(); t++)
    destroyers.emplace_back([&lists, t] {
      std::uint64_t i = 0;
      for (std::uint64_t v : lists[(t + 1) % 4])
        CHECK(v == mix(i++ + ((t + 1) % 4) * 1000000));
      CHECK(i == 50000);
    });
  for (auto &th : destroyers)
    th.join();
  std::vector<std::thread> clearers;
  for (std::size_t t = 0; t < lists.size(); t++)
    clearers.emplace_back([&lists, t] { lists[(t + 2) % 4].clear(); });
  for (auto &th : clearers)
    th.join();
}

struct counted {
  static constexpr std::uint64_t refuse = ~std::uint64_t{0}; // the constructor throws
  static int alive;
  std::uint64_t value;
  std::string name;
  counted(std::uint64_t v, std::string n) : value(v), name(std::move(n)) {
    if (v == refuse)
      throw std::runtime_error("refused");
    alive++;
  }
  ~counted() { alive--; }
};
int counted::alive = 0;

void test_free_list() {
  fw_pool_t *pool;
  std::size_t base;
  {
    fw::free_list<counted> fl(8);
    CHECK(fl.limit() == 8 && fl.size() == 0);
    pool = fl.pool();
    CHECK(pool != nullptr);
    base = pool_live(pool);
    std::vector<counted *> objs;
    for (std::uint64_t i = 0; i < 20; i++)
      objs.push_back(fl.create(i, "obj" + std::to_string(i)));
    CHECK(counted::alive == 20);
    CHECK(pool_live(pool) == base + 20);
    for (std::uint64_t i = 0; i < 20; i++)
      CHECK(objs[i]->value == i && objs[i]->name == "obj" + std::to_string(i));
    std::set<counted *> distinct(objs.begin(), objs.end());
    CHECK(distinct.size() == 20);
    for (counted *o : objs)
      fl.destroy(o);
    CHECK(counted::alive == 0);
    CHECK(fl.size() == 8); // the rest went back to the pool
    CHECK(pool_live(pool) == base + 8);

    // LIFO: the last object kept (the 8th destroyed) is reused first.
    counted *again = fl.create(100u, "again");
    CHECK(again == objs[7]);
    CHECK(fl.size() == 7);
    fl.destroy(again);

    // A throwing constructor gives the storage back.
    bool threw = false;
    try {
      (void)fl.create(counted::refuse, "no");
    } catch (const std::runtime_error &) {
      threw = true;
    }
    CHECK(threw && fl.size() == 8 && counted::alive == 0);

    fl.trim(2);
    CHECK(fl.size() == 2 && pool_live(pool) == base + 2);
    fl.destroy(nullptr);
  }
  // Destroying the free_list returned everything to the pool.
  CHECK(pool_live(pool) == base);
}

void test_pool_wrapper() {
  counted::alive = 0;
  fw::pool<counted> p;
  fw_pool_stats_t s = p.stats();
  CHECK(s.objects_live == 0 && s.object_size >= sizeof(counted));
  std::vector<counted *> objs;
  for (std::uint64_t i = 0; i < 1000; i++)
    objs.push_back(p.create(i, std::to_string(i * i)));
  CHECK(counted::alive == 1000);
  CHECK(p.stats().objects_live == 1000);
  for (std::uint64_t i = 0; i < 1000; i++)
    CHECK(objs[i]->value == i && objs[i]->name == std::to_string(i * i));
  for (std::size_t i = 0; i < 1000; i += 2)
    p.destroy(objs[i]);
  CHECK(counted::alive == 500 && p.stats().objects_live == 500);
  bool threw = false;
  try {
    (void)p.create(counted::refuse, "x");
  } catch (const std::runtime_error &) {
    threw = true;
  }
  CHECK(threw && p.stats().objects_live == 500);

  fw::pool<counted> moved(std::move(p));
  CHECK(p.get() == nullptr && moved.get() != nullptr);
  for (std::size_t i = 1; i < 1000; i += 2)
    moved.destroy(objs[i]);
  CHECK(counted::alive == 0 && moved.stats().objects_live == 0);

  fw_pool_options_t opt{};
  opt.size = sizeof opt;
  opt.zero = true;
  struct plain {
    std::uint64_t words[6];
  };
  fw::pool<plain> zp(&opt);
  plain *a = zp.create();
  std::memset(a, 0xff, sizeof *a);
  zp.destroy(a);
  plain *b = zp.create();
  for (auto w : b->words)
    CHECK(w == 0);
  zp.destroy(b);
}

} // namespace

int main() {
  run_all_containers<fw::allocator>();
  run_all_containers<fw::pool_allocator>();
  test_allocator_semantics();
  test_heap_allocator();
  test_pool_allocator();
  test_free_list();
  test_pool_wrapper();
  std::printf("container tests passed\n");
  return 0;
}
