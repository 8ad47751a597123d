/* report.c — what freeway prints about a process at exit: the leak report
 * (FREEWAY_LEAK_REPORT=1). Statistics are printed by stats.c. */
#include "thread.h"
#include "heap.h"
#include "message.h"
#include "check.h"
#include "options.h"

typedef struct { size_t blocks, bytes, shown; } fw_leak_ctx_t;

static bool fw_leak_visit(const void *block, size_t size, void *arg) {
  fw_leak_ctx_t *ctx = arg;
  ctx->blocks++;
  ctx->bytes += size;
  if (ctx->shown < 32) {
    ctx->shown++;
    fw_message("leak: block %p, %zu bytes\n", block, size);
  }
  return true;
}

void fw_leak_report(void) {
  fw_heap_t *heap = fw_tls_heap;
  if (heap == &fw_heap_empty) return;
  fw_leak_ctx_t ctx = {0, 0, 0};
  for (fw_heap_t *h = heap->tld->heaps; h; h = h->next) {
    /* cautious mode: the user's pointers and requested sizes */
    if (fw_opt(CAUTIOUS)) fw_check_heap_visit(h, fw_leak_visit, &ctx);
    else fw_heap_visit_blocks(h, fw_leak_visit, &ctx);
  }
  fw_message("leak report: %zu blocks (%zu bytes of block space) still live at exit in this thread's heaps\n",
             ctx.blocks, ctx.bytes);
}
