// A point in a backend's stream of work (ggml's ggml_backend_event): Kernels::record_event marks
// everything issued to the backend so far, and the host waits for it with synchronize().
//
// What it is not: a lock or a callback. On a backend whose ops finish before they return (the
// cpu backend, the emulated GPU) every event is complete when it is made: an Event without a
// backend part. A device backend (kernels/cuda/) gives it a part that waits on the device.
// Move-only: the part owns a device object.
#pragma once

#include <memory>
#include <utility>

namespace maxctx::kernels {

class Event {
 public:
  // A backend's event object; the backend that made it is its only user.
  class Pending {
   public:
    virtual ~Pending() = default;
    virtual void synchronize() = 0;  // returns once the marked work has finished
    virtual bool done() = 0;         // whether it has, without waiting
  };

  Event() = default;  // complete
  explicit Event(std::unique_ptr<Pending> pending) : pending_(std::move(pending)) {}
  Event(Event&&) = default;
  Event& operator=(Event&&) = default;

  // The host waits until the work the event marks has finished; then the event is complete.
  void synchronize() {
    if (pending_ == nullptr) return;
    pending_->synchronize();
    pending_.reset();
  }
  bool done() const { return pending_ == nullptr || pending_->done(); }

 private:
  std::unique_ptr<Pending> pending_;
};

}  // namespace maxctx::kernels
