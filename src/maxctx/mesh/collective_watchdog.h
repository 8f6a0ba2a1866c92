// The collective watchdog: a rank that stops (a hung disk, a stopped process, a rank stuck in its
// own loop) would otherwise leave every other rank waiting in its next collective forever. With a
// timeout set, a watchdog thread looks twice a second at the collective this rank waits in; once
// one has waited longer than the timeout, the rank prints one line naming it (verb, the mesh axes
// of its communicator, how long) and, after a short grace so that the other waiting ranks print
// theirs, ends the job (the abort hook: MPI_Abort).
//
// Cost on the collective path: with the watchdog on, WaitScope stores the verb, the communicator
// and a time stamp on entry and clears the verb on exit (relaxed stores and a clock read); off,
// it reads one flag. The MPI calls themselves are untouched. bench/collectives measures it on an
// 8-byte all_reduce, off against on.
//
// What it is not: a progress guarantee inside MPI (a collective that returns never trips it) or
// a deadlock detector between threads; only the thread that calls MPI (FUNNELED) is watched.
#pragma once

#include <atomic>
#include <cstdint>

namespace maxctx {

class CommunicatorImpl;

// Starts (or retimes) the process's watchdog thread; 0 stops watching. Collective on nothing:
// every rank calls it with the same configured value (collective_timeout_seconds).
void set_collective_timeout(double seconds);
// Stops the thread (MPI runtime teardown, before MPI_Finalize).
void stop_collective_watchdog();
// How often a rank that works alone tells the ranks waiting for it that it still makes progress
// (mesh/root_task.h): a quarter of the timeout, between 10 ms and 10 s; 10 s with the watchdog off.
double heartbeat_seconds();

// Marks "this thread waits in `verb` over `comm`" for its lifetime (comm null: a point-to-point
// request, whose communicator the request does not keep). Nested scopes keep the outermost.
class WaitScope {
 public:
  WaitScope(const char* verb, const CommunicatorImpl* comm);
  ~WaitScope();
  WaitScope(const WaitScope&) = delete;
  WaitScope& operator=(const WaitScope&) = delete;

 private:
  bool outermost_ = false;
};

}  // namespace maxctx
