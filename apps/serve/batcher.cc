#include "batcher.h"

#include <algorithm>
#include <future>

#include "http_error.h"

namespace memoplan::serve {

using Clock = std::chrono::steady_clock;

struct Batcher::Pending {
  std::vector<HostTensor> inputs;
  std::string key;  // empty: runs alone
  int64_t rows = 0;
  Clock::time_point arrival;
  std::promise<std::vector<HostTensor>> promise;
  // Set on the worker, handed to the promise in the job's finish.
  std::vector<HostTensor> outputs;
  std::exception_ptr error;
};

std::string batch_key(const std::vector<HostTensor>& inputs, int64_t* rows) {
  *rows = 0;
  if (inputs.empty()) return {};
  std::string key;
  for (const HostTensor& t : inputs) {
    if (t.shape.empty() || t.shape[0] <= 0) return {};
    if (*rows == 0) *rows = t.shape[0];
    if (t.shape[0] != *rows) {
      *rows = 0;
      return {};
    }
    key += datatype_name(t.datatype);
    for (size_t d = 1; d < t.shape.size(); ++d) key += "x" + std::to_string(t.shape[d]);
    key += ';';
  }
  return key;
}

std::vector<HostTensor> stack_rows(const std::vector<const std::vector<HostTensor>*>& requests) {
  std::vector<HostTensor> stacked = *requests.front();
  for (size_t i = 0; i < stacked.size(); ++i) {
    size_t bytes = 0;
    for (const auto* r : requests) bytes += (*r)[i].bytes.size();
    stacked[i].bytes.reserve(bytes);
    for (size_t k = 1; k < requests.size(); ++k) {
      stacked[i].shape[0] += (*requests[k])[i].shape[0];
      stacked[i].bytes += (*requests[k])[i].bytes;
    }
  }
  return stacked;
}

bool split_rows(const std::vector<HostTensor>& outputs, const std::vector<int64_t>& rows,
                std::vector<std::vector<HostTensor>>* parts) {
  int64_t total = 0;
  for (int64_t r : rows) total += r;
  for (const HostTensor& o : outputs) {
    if (o.shape.empty() || o.shape[0] != total || o.bytes.size() % static_cast<size_t>(total)) {
      return false;
    }
  }
  parts->assign(rows.size(), {});
  for (const HostTensor& o : outputs) {
    const size_t row_bytes = o.bytes.size() / static_cast<size_t>(total);
    size_t at = 0;
    for (size_t k = 0; k < rows.size(); ++k) {
      HostTensor part;
      part.name = o.name;
      part.datatype = o.datatype;
      part.shape = o.shape;
      part.shape[0] = rows[k];
      const size_t n = row_bytes * static_cast<size_t>(rows[k]);
      part.bytes.assign(o.bytes, at, n);
      at += n;
      (*parts)[k].push_back(std::move(part));
    }
  }
  return true;
}

Batcher::Batcher(const BatchingOptions& options, WorkerPool& pool, Metrics& metrics,
                 Forward forward)
    : options_(options), pool_(pool), metrics_(metrics), forward_(std::move(forward)) {
  // A worker that finished any job (not only a batch) may take the next batch.
  pool_.set_on_idle([this] {
    std::lock_guard<std::mutex> lock(mutex_);
    changed_.notify_all();
  });
  scheduler_ = std::thread([this] { schedule(); });
}

Batcher::~Batcher() { stop(); }

void Batcher::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_ && !scheduler_.joinable()) return;
    stopping_ = true;
  }
  changed_.notify_all();
  if (scheduler_.joinable()) scheduler_.join();
  pool_.set_on_idle(nullptr);
}

std::vector<HostTensor> Batcher::infer(std::vector<HostTensor> inputs) {
  auto p = std::make_shared<Pending>();
  p->inputs = std::move(inputs);
  p->key = batch_key(p->inputs, &p->rows);
  p->arrival = Clock::now();
  std::future<std::vector<HostTensor>> result = p->promise.get_future();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) throw HttpError(503, "server stopping");
    if (pending_.size() >= options_.max_pending) {
      throw HttpError(503, "server busy: " + std::to_string(pending_.size()) +
                               " request(s) already wait to be batched; retry later");
    }
    pending_.push_back(p);
  }
  changed_.notify_all();
  return result.get();
}

size_t Batcher::pending() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return pending_.size();
}

bool Batcher::worker_idle() const {
  return static_cast<size_t>(pool_.busy()) + pool_.depth() < static_cast<size_t>(pool_.workers());
}

void Batcher::schedule() {
  std::unique_lock<std::mutex> lock(mutex_);
  const int64_t max_rows = std::max(1, options_.max_batch_size);
  for (;;) {
    if (pending_.empty()) {
      if (stopping_) return;
      changed_.wait(lock);
      continue;
    }
    // A batch is formed for an idle worker: while all are busy, requests keep joining.
    if (!stopping_ && !worker_idle()) {
      changed_.wait(lock);
      continue;
    }
    // The oldest request and the later ones that fit beside it, in arrival order.
    const std::shared_ptr<Pending>& front = pending_.front();
    std::vector<size_t> picked = {0};
    int64_t rows = front->rows;
    if (!front->key.empty()) {
      for (size_t i = 1; i < pending_.size() && rows < max_rows; ++i) {
        const Pending& p = *pending_[i];
        if (p.key == front->key && rows + p.rows <= max_rows) {
          picked.push_back(i);
          rows += p.rows;
        }
      }
    }
    const bool preferred =
        std::find(options_.preferred_batch_sizes.begin(), options_.preferred_batch_sizes.end(),
                  rows) != options_.preferred_batch_sizes.end();
    const bool full = front->key.empty() || rows >= max_rows || preferred;
    const Clock::time_point deadline = front->arrival + options_.max_queue_delay;
    if (!full && !stopping_ && Clock::now() < deadline) {
      changed_.wait_until(lock, deadline);
      continue;
    }
    std::vector<std::shared_ptr<Pending>> batch;
    for (size_t k = picked.size(); k-- > 0;) {
      batch.push_back(std::move(pending_[picked[k]]));
      pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(picked[k]));
    }
    std::reverse(batch.begin(), batch.end());
    lock.unlock();
    dispatch(std::move(batch));
    lock.lock();
  }
}

void Batcher::dispatch(std::vector<std::shared_ptr<Pending>> batch) {
  auto items = std::make_shared<std::vector<std::shared_ptr<Pending>>>(std::move(batch));
  WorkerPool::Job job;
  job.run = [this, items] {
    const Clock::time_point start = Clock::now();
    int64_t rows = 0;
    for (const auto& p : *items) {
      rows += p->rows > 0 ? p->rows : 1;
      metrics_.observe_batch_queue_delay(std::chrono::duration<double>(start - p->arrival).count());
    }
    metrics_.observe_batch(static_cast<uint64_t>(rows));
    bool done = false;
    if (items->size() > 1) {
      std::vector<const std::vector<HostTensor>*> requests;
      std::vector<int64_t> parts_rows;
      for (const auto& p : *items) {
        requests.push_back(&p->inputs);
        parts_rows.push_back(p->rows);
      }
      try {
        std::vector<std::vector<HostTensor>> parts;
        if (split_rows(forward_(stack_rows(requests)), parts_rows, &parts)) {
          for (size_t k = 0; k < items->size(); ++k) (*items)[k]->outputs = std::move(parts[k]);
          done = true;
        }
      } catch (...) {
        // One request's input can fail the whole batch: each runs alone below.
      }
    }
    if (!done) {
      for (const auto& p : *items) {
        try {
          p->outputs = forward_(p->inputs);
        } catch (...) {
          p->error = std::current_exception();
        }
      }
    }
  };
  job.finish = [this, items] {
    for (const auto& p : *items) {
      if (p->error) {
        p->promise.set_exception(p->error);
      } else {
        p->promise.set_value(std::move(p->outputs));
      }
      p->inputs.clear();
    }
  };
  if (!pool_.try_submit(std::move(job))) {
    for (const auto& p : *items) {
      p->promise.set_exception(std::make_exception_ptr(HttpError(
          503, "server busy: " + std::to_string(pool_.workers()) + " worker(s) and " +
                   std::to_string(pool_.capacity()) + " queue slot(s) taken; retry later")));
    }
  }
}

}  // namespace memoplan::serve
