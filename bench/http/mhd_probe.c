// libmicrohttpd 0.9.75 probe for bench/http/transport.mjs (docs/server.md, "Why Boost.Beast"): an epoll
// thread, strict mode, 2 s inactivity timeout, 8 MiB body cap, 64 KiB per-connection memory. GET
// /health, POST anything (answers the body length). Built by hand, not by CMake:
//   gcc -O2 bench/http/mhd_probe.c -o /tmp/mhd_probe $(pkg-config --cflags --libs libmicrohttpd)
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <signal.h>
struct St { size_t n; int over; };
static enum MHD_Result reply(struct MHD_Connection* c, int status, const char* body) {
  struct MHD_Response* r = MHD_create_response_from_buffer(strlen(body), (void*)body, MHD_RESPMEM_MUST_COPY);
  MHD_add_response_header(r, "Content-Type", "application/json");
  enum MHD_Result ret = MHD_queue_response(c, status, r);
  MHD_destroy_response(r);
  return ret;
}
static enum MHD_Result handler(void* cls, struct MHD_Connection* c, const char* url, const char* method,
                               const char* version, const char* data, size_t* size, void** ctx) {
  (void)cls; (void)version;
  if (!*ctx) { struct St* s = calloc(1, sizeof *s); *ctx = s; return MHD_YES; }
  struct St* s = *ctx;
  if (*size) { s->n += *size; if (s->n > (8u << 20)) s->over = 1; *size = 0; return MHD_YES; }
  if (s->over) return reply(c, 413, "{\"error\":\"too large\"}");
  if (!strcmp(url, "/health")) return reply(c, 200, "{\"status\":\"ok\"}");
  char buf[64]; snprintf(buf, sizeof buf, "{\"bytes\":%zu}", s->n);
  if (!strcmp(method, "POST")) return reply(c, 200, buf);
  return reply(c, 404, "{}");
}
static void done(void* cls, struct MHD_Connection* c, void** ctx, enum MHD_RequestTerminationCode t) {
  (void)cls; (void)c; (void)t; free(*ctx); *ctx = NULL;
}
int main(int argc, char** argv) {
  int port = argc > 1 ? atoi(argv[1]) : 18081;
  struct MHD_Daemon* d = MHD_start_daemon(MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG, port, NULL, NULL,
      handler, NULL, MHD_OPTION_STRICT_FOR_CLIENT, 1, MHD_OPTION_CONNECTION_TIMEOUT, 2u,
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64u << 10), MHD_OPTION_CONNECTION_LIMIT, 4000u,
      MHD_OPTION_NOTIFY_COMPLETED, done, NULL, MHD_OPTION_END);
  if (!d) { fprintf(stderr, "start failed\n"); return 1; }
  fprintf(stderr, "listening on http://127.0.0.1:%d\n", port);
  pause();
  return 0;
}
