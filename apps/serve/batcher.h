// Dynamic batching, as Triton's dynamic batcher does it: requests whose inputs differ only in
// dimension 0 (the batch) wait briefly and are stacked along it into one forward call, whose
// outputs are split back by rows. A batch goes to a worker when one is idle and the batch is
// full (max_batch_size rows), has a preferred size, or its oldest request has waited
// max_queue_delay; while every worker is busy, requests keep joining. With no delay, a request
// that finds an idle worker runs at once: batches form only under load. Torch-free: the forward
// call is a function the model provides; stacking and splitting concatenate and slice bytes.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "metrics.h"
#include "tensor.h"
#include "worker_pool.h"

namespace memoplan::serve {

struct BatchingOptions {
  int max_batch_size = 0;                  // rows in one forward call; 0 or 1: no batching
  std::vector<int> preferred_batch_sizes;  // dispatched at once when a batch reaches one
  std::chrono::microseconds max_queue_delay{0};
  size_t max_pending = 32;  // requests waiting to join a batch; more are answered 503
};

class Batcher {
 public:
  // Runs one forward call on a worker thread; throws HttpError as Model::infer does.
  using Forward = std::function<std::vector<HostTensor>(const std::vector<HostTensor>&)>;

  Batcher(const BatchingOptions& options, WorkerPool& pool, Metrics& metrics, Forward forward);
  ~Batcher();
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // `inputs` in forward's order, checked (match_inputs). Blocks until this request's outputs are
  // known: every output of the model, its rows only. Throws HttpError: 503 when max_pending
  // requests already wait, the workers' queue is full, or the batcher is stopping; the forward
  // call's own errors (a batch that fails is run again request by request, so one request's bad
  // input fails that request alone).
  std::vector<HostTensor> infer(std::vector<HostTensor> inputs);

  // Dispatches what waits, then stops the scheduler. Idempotent.
  void stop();

  const BatchingOptions& options() const { return options_; }
  size_t pending() const;  // requests waiting to join a batch

 private:
  struct Pending;
  void schedule();
  bool worker_idle() const;
  void dispatch(std::vector<std::shared_ptr<Pending>> batch);

  const BatchingOptions options_;
  WorkerPool& pool_;
  Metrics& metrics_;
  const Forward forward_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;  // arrivals, workers done, stop
  std::deque<std::shared_ptr<Pending>> pending_;
  bool stopping_ = false;
  std::thread scheduler_;
};

// Stacks along dimension 0 and splits back: exposed for the unit tests. The key of a request
// whose inputs all have a dimension 0 of the same size: that size in *rows, and a string equal
// for requests that may share a batch (datatypes and the other dimensions); nullopt-like empty
// key and rows 0 when it cannot be batched (a scalar input, inputs of unequal batch).
std::string batch_key(const std::vector<HostTensor>& inputs, int64_t* rows);
std::vector<HostTensor> stack_rows(const std::vector<const std::vector<HostTensor>*>& requests);
// Splits each output into parts of `rows[i]` rows; false when an output has no dimension 0 equal
// to the sum (the model's outputs are not per row: the requests must run one by one).
bool split_rows(const std::vector<HostTensor>& outputs, const std::vector<int64_t>& rows,
                std::vector<std::vector<HostTensor>>* parts);

}  // namespace memoplan::serve
