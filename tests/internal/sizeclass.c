/* sizeclass.c — fw_size_class (types.h) against the generated table
 * fw_class_size[] (sizeclass.h) for every size the classes serve. */
#include "itest.h"
#include "types.h"

static void t_sizeclass(void) {
  /* the table: class 0 unused, strictly increasing, ends at FW_MEDIUM_MAX,
   * every block above 8 bytes a multiple of 16 */
  CHECK(fw_class_size[0] == 0);
  CHECK(fw_class_size[1] == 8);
  CHECK(fw_class_size[FW_CLASS_COUNT - 1] == FW_MEDIUM_MAX);
  CHECK(FW_CLASS_LARGE == FW_CLASS_COUNT);
  CHECK(FW_DIRECT_SLOTS == FW_DIRECT_MAX + 1);
  for (size_t c = 1; c < FW_CLASS_COUNT; c++) {
    CHECKF(fw_class_size[c] > fw_class_size[c - 1], "class %zu", c);
    if (c > 1) CHECKF(fw_class_size[c] % 16 == 0, "class %zu: %u", c, fw_class_size[c]);
  }

  size_t prev = 0;
  for (size_t size = 0; size <= FW_MEDIUM_MAX; size++) {
    size_t c = fw_size_class(size);
    CHECKF(c >= 1 && c < FW_CLASS_COUNT, "fw_size_class(%zu) = %zu", size, c);
    CHECKF(fw_class_size[c] >= size, "size %zu: class %zu holds %u", size, c, fw_class_size[c]);
    /* the smallest class that fits: the one below is too small */
    CHECKF(fw_class_size[c - 1] < size || c == 1, "size %zu: class %zu, but class %zu (%u) fits", size, c,
           c - 1, fw_class_size[c - 1]);
    CHECKF(c >= prev, "size %zu: class %zu after class %zu", size, c, prev);
    CHECKF(c <= prev + 1 || size == 0, "size %zu: class %zu skips classes after %zu", size, c, prev);
    /* the design's waste bound: below 12.5 % above 128 bytes */
    if (size > 128) CHECKF((fw_class_size[c] - size) * 8 < fw_class_size[c], "size %zu: block %u", size,
                           fw_class_size[c]);
    prev = c;
  }
  /* every class is reached, and by its own block size */
  for (size_t c = 1; c < FW_CLASS_COUNT; c++) CHECK(fw_size_class(fw_class_size[c]) == c);
  CHECK(fw_size_class(FW_SMALL_MAX) < fw_size_class(FW_SMALL_MAX + 1));
}

/* fw_class_divisor tells the multiples of each block size among offsets
 * inside a segment (all realloc asks it about) and a spread of larger ones
 * below 2^32, as the remainder does. */
static void t_class_divisor(void) {
  CHECK(fw_class_divisor[0] == 0);
  for (size_t c = 1; c < FW_CLASS_COUNT; c++) {
    uint64_t m = fw_class_divisor[c];
    size_t bs = fw_class_size[c];
    for (uint64_t off = 0; off < ((uint64_t)1 << 32); off += off < FW_SEGMENT_SIZE ? 1 : 65521) {
      bool multiple = off * m <= m - 1;
      CHECKF(multiple == (off % bs == 0), "class %zu (%zu bytes): offset %llu", c, bs, (unsigned long long)off);
    }
  }
}

/* What api.c's aligned allocations rely on: a request rounded up to a
 * multiple of a power-of-two alignment up to FW_ALIGN_BY_CLASS lands in a
 * class whose size is a multiple of that alignment (so every block of a
 * page that starts so aligned is aligned), and page starts are aligned to
 * FW_ALIGN_BY_CLASS (the segment header's size and the slots'). */
static void t_aligned_by_class(void) {
  CHECK(FW_SEGMENT_HEADER % FW_ALIGN_BY_CLASS == 0);
  CHECK(FW_SLICE_SIZE % FW_ALIGN_BY_CLASS == 0);
  for (size_t a = 2 * FW_MIN_ALIGN; a <= FW_ALIGN_BY_CLASS; a *= 2) {
    for (size_t size = 1; size <= FW_MEDIUM_MAX; size++) {
      size_t n = size < a ? a : (size + a - 1) & ~(a - 1);
      if (n > FW_MEDIUM_MAX) break;
      size_t bs = fw_class_size[fw_size_class(n)];
      CHECKF(bs % a == 0, "aligned %zu, size %zu: rounded to %zu, class of %zu bytes", a, size, n, bs);
    }
  }
}

int main(int argc, char **argv) {
  static const it_section s[] = {
      {"sizeclass", t_sizeclass}, {"class_divisor", t_class_divisor}, {"aligned_by_class", t_aligned_by_class}};
  return it_main(argc, argv, s, IT_COUNT(s));
}
