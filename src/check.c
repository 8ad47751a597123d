/* check.c — cautious mode (FREEWAY_CAUTIOUS=1).
 *
 * In cautious mode every block carries a trailer: the bytes between the end
 * of the request and the last four bytes of the block are filled with a
 * canary, and the last four bytes hold the request's end offset. A freed
 * block carries a tag in its second word. Every free then checks that the
 * pointer is one freeway handed out, that the block is not free already and
 * that nothing wrote past the request, and reports what it found with the
 * address and size before aborting. See alloc.c for the whole design. */
#include "check.h"
#include "page.h"
#include "message.h"
#include "os.h"
#include <string.h>

#define FW_CANARY 0xFD
#define FW_FREED_TAG 0x6672656564ull /* "freed" */

void fw_check_fail(const char *what, const void *p, size_t size) {
  fw_message("cautious mode: %s: address %p, size %zu; aborting\n", what, p, size);
  fw_os_abort();
}

void fw_check_init(void) {
  /* the generated table and the arithmetic class function must agree */
  for (size_t c = 1; c < FW_CLASS_COUNT; c++) {
    if (fw_size_class(fw_class_size[c]) != c || fw_size_class(fw_class_size[c - 1] + 1) != c) {
      fw_message("size class table and fw_size_class disagree at class %zu\n", c);
      fw_os_abort();
    }
  }
}

bool fw_check_pointer(const void *p) { return fw_page_of_pointer(p, 0) != NULL; }

static uint8_t *fw_block_end(const fw_page_t *pg, const void *b) {
  return (uint8_t *)b + pg->block_size;
}

static void fw_trailer_write(const fw_page_t *pg, uint8_t *b, uint8_t *user, size_t size) {
  uint8_t *end = fw_block_end(pg, b);
  uint32_t user_end = (uint32_t)((user + size) - b);
  uint8_t *canary = user + size;
  size_t n = (size_t)(end - 4 - canary);
  if (n > 64) n = 64;
  memset(canary, FW_CANARY, n);
  memcpy(end - 4, &user_end, 4);
}

static size_t fw_trailer_user_end(const fw_page_t *pg, const uint8_t *b) {
  uint32_t user_end;
  memcpy(&user_end, fw_block_end(pg, b) - 4, 4);
  return user_end;
}

void fw_check_after_malloc(void *user, size_t size) {
  fw_page_t *pg = fw_ptr_page(user);
  uint8_t *b = (uint8_t *)fw_page_block_start(pg, user);
  if (pg->block_size >= 16) ((uint64_t *)b)[1] = 0;
  fw_trailer_write(pg, b, user, size);
}

void fw_check_resize(void *p, size_t size) {
  fw_page_t *pg = fw_ptr_page(p);
  uint8_t *b = (uint8_t *)fw_page_block_start(pg, p);
  fw_trailer_write(pg, b, p, size);
}

size_t fw_check_usable(const void *p) {
  if (!fw_check_pointer(p)) fw_check_fail("malloc_usable_size of a pointer that freeway did not hand out", p, 0);
  fw_page_t *pg = fw_ptr_page(p);
  const uint8_t *b = (const uint8_t *)fw_page_block_start(pg, p);
  return fw_trailer_user_end(pg, b) - (size_t)((const uint8_t *)p - b);
}

void fw_check_free(fw_page_t *pg, const void *block) {
  uint8_t *b = (uint8_t *)block;
  uint64_t tag = FW_FREED_TAG ^ (uint64_t)(uintptr_t)b;
  if (pg->block_size >= 16 && ((uint64_t *)b)[1] == tag) {
    bool local = atomic_load_explicit(&fw_page_segment(pg)->thread_id, memory_order_relaxed) == fw_thread_id();
    bool found = !local;  /* a remote page's lists cannot be walked safely: trust the tag */
    for (fw_block_t *f = pg->free; local && f != FW_LIST_END; f = fw_block_next(f))
      if ((uint8_t *)f == b) { found = true; break; }
    if (found) fw_check_fail("double free", b, pg->block_size);
  }
  size_t user_end = fw_trailer_user_end(pg, b);
  if (user_end > pg->block_size - 4) fw_check_fail("block header damaged (write past the end of a neighbour?)", b, pg->block_size);
  uint8_t *end = fw_block_end(pg, b);
  size_t n = (size_t)(end - 4 - (b + user_end));
  if (n > 64) n = 64;
  for (size_t i = 0; i < n; i++)
    if (b[user_end + i] != FW_CANARY)
      fw_check_fail("write past the end of the requested size", b, user_end);
  if (pg->block_size >= 16) ((uint64_t *)b)[1] = tag;
}

