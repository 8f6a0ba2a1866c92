// late_downloads.h: downloads queued with a sequence number, written in order by the first
// synchronize that covers them.
#include "maxctx/kernels/emulated/late_downloads.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace maxctx::kernels::emulated {

// An event over the downloads queued up to `sequence_`.
class LateDownloads::Pending final : public Event::Pending {
 public:
  Pending(LateDownloads& downloads, uint64_t sequence)
      : downloads_(downloads), sequence_(sequence) {}
  void synchronize() override { downloads_.deliver_through(sequence_); }
  bool done() override { return downloads_.delivered_through(sequence_); }

 private:
  LateDownloads& downloads_;
  uint64_t sequence_;
};

Event LateDownloads::download(void* host, const void* source, size_t bytes) {
  const std::lock_guard lock(mutex_);
  const auto* first = static_cast<const std::byte*>(source);
  queued_.push_back({++issued_, host, std::vector<std::byte>(first, first + bytes)});
  return Event(std::make_unique<Pending>(*this, issued_));
}

Event LateDownloads::mark() {
  const std::lock_guard lock(mutex_);
  return Event(std::make_unique<Pending>(*this, issued_));
}

void LateDownloads::deliver_all() {
  const std::lock_guard lock(mutex_);
  for (const Download& d : queued_) std::memcpy(d.host, d.bytes.data(), d.bytes.size());
  queued_.clear();
}

void LateDownloads::deliver_through(uint64_t sequence) {
  const std::lock_guard lock(mutex_);
  const auto end = std::find_if(queued_.begin(), queued_.end(),
                                [&](const Download& d) { return d.sequence > sequence; });
  for (auto d = queued_.begin(); d != end; ++d)
    std::memcpy(d->host, d->bytes.data(), d->bytes.size());
  queued_.erase(queued_.begin(), end);
}

bool LateDownloads::delivered_through(uint64_t sequence) {
  const std::lock_guard lock(mutex_);
  return queued_.empty() || queued_.front().sequence > sequence;
}

}  // namespace maxctx::kernels::emulated
