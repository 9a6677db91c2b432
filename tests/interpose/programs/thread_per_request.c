/* A server with a thread per request (Python's ThreadingHTTPServer, thread-per-connection C
 * servers): every request runs one pass on a thread of its own, which then exits, so no thread
 * ever sees the passes detection needs. Rounds of `clients` threads at once (default 4), `rounds`
 * rounds (default 50); each thread parses a "request" (small blocks), runs an 8-layer pass of
 * outputs and workspaces (8 KiB-1 MiB, checked patterns) and leaves its "response" to the main
 * thread, which frees it after the join. Run with stats_print: the test checks that the pass was
 * learned from the exited threads and that the threads after them were served from slabs.
 *
 *   thread_per_request [rounds [clients]]
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "program_check.h"

static const size_t kOutputs[8] = {802816, 802816, 401408, 401408, 200704, 200704, 100352, 8192};
static const size_t kWorkspaces[8] = {1048576, 36864, 16384, 36864, 16384, 8192, 8192, 16384};

struct Request {
  uint32_t seed;
  char* response;
};

static void* handle(void* arg) {
  struct Request* request = (struct Request*)arg;
  char* header = (char*)malloc(200); /* below min_size: the fallback's */
  CHECK(header != NULL);
  memset(header, 1, 200);
  char* input = NULL;
  for (int i = 0; i < 8; ++i) {
    char* output = (char*)malloc(kOutputs[i]);
    char* workspace = (char*)malloc(kWorkspaces[i]);
    CHECK(output && workspace);
    fill_pattern(output, kOutputs[i], request->seed + (uint32_t)i);
    memset(workspace, i, kWorkspaces[i]);
    CHECK(input == NULL || pattern_intact(input, kOutputs[i - 1], request->seed + (uint32_t)i - 1));
    free(workspace);
    free(input);
    input = output;
  }
  CHECK(pattern_intact(input, kOutputs[7], request->seed + 7));
  request->response = input; /* freed by the main thread after the join */
  free(header);
  return NULL;
}

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? atoi(argv[1]) : 50;
  const int clients = argc > 2 ? atoi(argv[2]) : 4;
  CHECK(rounds > 0 && clients > 0 && clients <= 64);
  pthread_t threads[64];
  struct Request requests[64];
  uint32_t seed = 1;
  for (int r = 0; r < rounds; ++r) {
    for (int c = 0; c < clients; ++c) {
      requests[c].seed = seed;
      seed += 16;
      requests[c].response = NULL;
      CHECK(pthread_create(&threads[c], NULL, handle, &requests[c]) == 0);
    }
    for (int c = 0; c < clients; ++c) {
      CHECK(pthread_join(threads[c], NULL) == 0);
      CHECK(requests[c].response && pattern_intact(requests[c].response, kOutputs[7],
                                                   requests[c].seed + 7));
      free(requests[c].response);
    }
  }
  return 0;
}
