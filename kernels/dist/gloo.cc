// gloo.cc — kl_comm (kl_comm.h) over Gloo: TCP transport, ranks meeting
// through Gloo's rendezvous Store implemented on the run's kl_store. The
// one C++ file of the kernels; no exception leaves it: every entry point
// catches and returns a KL_ code with a kl_err message.
#include "kl_comm.h"

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// A store wait is cut into slices of this length so that an abort (or the
// run's cancel) is seen promptly while a rank waits for the others.
constexpr int kStoreSliceMs = 250;
// How often the watcher polls the run's cancel flag.
constexpr int kCancelPollMs = 20;
// The key (after the prefix) under which the first rank to fail (not by a
// timeout) says so to the others (comm_fail).
constexpr const char *kAbortKey = "abort";
// How long a rank that posted its address and was then aborted still
// waits for the others' (to connect, then fail the pairs: see comm_fail)
// before it withdraws: the others are alive if they all post within it.
constexpr int kPostedAbortGraceMs = 2000;
// How long a rank aborted while its pairs connected waits, once they are
// up, before it fails them (kl_comm_open).
constexpr int kSettleMs = 200;
// How often one rank per node looks for that key while its collectives
// run: a peer that died or was cancelled mid-collective may leave this
// node's sends waiting on a socket that never fails (below).
constexpr int kAbortPollMs = 1000;

// An error of ours thrown through Gloo (from the Store) and caught at the
// C boundary with its code.
struct kl_error : std::exception {
    int code;
    std::string msg;
    kl_error(int c, std::string m) : code(c), msg(std::move(m)) {}
    const char *what() const noexcept override { return msg.c_str(); }
};

} // namespace

// gloo::transport::tcp::Context::signalException(const std::string &) fails
// every pair of a context, waking whatever waits on them and closing their
// sockets: what Gloo does itself when a wait times out, so that all ranks
// fail fast. It is how an abort from another thread reaches a rank blocked
// in a collective (closing the sockets alone wakes the peers, not it). It
// is protected, and Debian's libgloo-dev cannot even declare it (its
// tcp/context.h includes gloo/common/memory.h, which the package lacks), so
// it is called by its exported symbol: a non-virtual member function under
// the Itanium C++ ABI takes `this` first and a reference as a pointer.
static_assert(__GXX_ABI_VERSION >= 1002 && _GLIBCXX_USE_CXX11_ABI,
              "the symbol below is the Itanium ABI's, with the C++11 std::string");
extern "C" void kl__gloo_tcp_context_signal(void *tcp_context, const std::string *msg) __asm__(
    "_ZN4gloo9transport3tcp7Context15signalExceptionERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE");

namespace {

// A rendezvous context whose transport another thread may fail. The
// transport context of a tcp device is a tcp::Context, whose first base is
// transport::Context: the same address.
//
// connect_mesh is Gloo's connectFullMesh (each rank posts, under its rank,
// the addresses of its pairs in rank order; then connects each pair to the
// address the peer posted for it) with every address read before any pair
// connects: Gloo's reads one address and connects that pair, then the
// next, so a rank that gave up on a later address closed pairs its peers
// were still setting up, and a connection reset during its setup throws on
// Gloo's event-loop thread (getpeername in tcp/address.cc), which ends the
// process. Here no rank connects until every rank has posted, and a rank
// that has posted connects before it gives up (see comm_fail).
class comm_context : public gloo::rendezvous::Context {
  public:
    using gloo::rendezvous::Context::Context;
    void fail_all(const std::string &why)
    {
        if (transportContext_)
            kl__gloo_tcp_context_signal(transportContext_.get(), &why);
    }

    void connect_mesh(gloo::rendezvous::Store &store, const std::shared_ptr<gloo::transport::Device> &dev)
    {
        std::shared_ptr<gloo::transport::Context> tc = dev->createContext(rank, size);
        tc->setTimeout(getTimeout());
        std::vector<char> mine;
        for (int peer = 0; peer < size; peer++) {
            if (peer == rank)
                continue;
            std::vector<char> bytes = tc->createPair(peer)->address().bytes();
            mine.insert(mine.end(), bytes.begin(), bytes.end());
        }
        store.set(std::to_string(rank), mine);
        std::vector<std::vector<char>> addrs((size_t)size);
        for (int peer = 0; peer < size; peer++) {
            if (peer == rank)
                continue;
            std::vector<char> theirs = store.get(std::to_string(peer));
            const size_t each = theirs.size() / (size_t)(size - 1);
            if (each == 0 || theirs.size() % (size_t)(size - 1) != 0)
                throw kl_error(KL_EBACKEND, "rendezvous: rank " + std::to_string(peer) + " posted " +
                                                std::to_string(theirs.size()) + " bytes of addresses");
            const size_t slot = (size_t)(rank < peer ? rank : rank - 1);
            addrs[(size_t)peer].assign(theirs.begin() + (long)(slot * each),
                                       theirs.begin() + (long)((slot + 1) * each));
        }
        for (int peer = 0; peer < size; peer++)
            if (peer != rank)
                tc->getPair(peer)->connect(addrs[(size_t)peer]);
        device_ = dev;
        transportContext_ = std::move(tc);
    }
};

} // namespace

struct kl_comm {
    const kl_dist *dist;
    std::string prefix;
    int rank = 0, size = 0;
    milliseconds timeout{0};
    std::shared_ptr<gloo::transport::Device> dev;
    std::shared_ptr<comm_context> ctx;
    uint32_t tag = 0;
    // What failed the communicator, 0 while it works: KL_ECANCELED once
    // aborted; the first failure's code otherwise.
    std::atomic<int> failed{0};
    // Guards `connected` against abort: the transport exists only once
    // connect_mesh has returned; and `posted` against the decision to tell
    // an abort (comm_fail).
    std::mutex mu;
    bool connected = false;
    // This rank's addresses are in the store: the others will connect to
    // it, and it connects before it gives up (comm_fail).
    std::atomic<bool> posted{false};
    // The collective's output buffer while one runs (mu): an abort wakes
    // its waits directly. Gloo (Debian's 2022 build) fails a pair's queued
    // operations when the pair fails, but not an unbound-buffer send that
    // is already partly written (Pair::signalException walks tx_ for bound
    // buffers only), so a rank sending a large segment when its peer died,
    // or when it was aborted, would wait for its whole timeout.
    gloo::transport::UnboundBuffer *inflight = nullptr;
    // The watcher: the run's cancel flag, the abort key, the kicks.
    volatile int *cancel = nullptr;
    std::thread watcher;
    std::mutex wmu;
    std::condition_variable wcv;
    bool stopping = false;
};

namespace {

// 1 when another rank wrote the abort key (why in *why).
bool peer_gave_up(kl_comm *c, std::string *why)
{
    kl_store *s = c->dist->store;
    void *data = nullptr;
    size_t len = 0;
    if (s->get(s->ctx, (c->prefix + "_" + kAbortKey).c_str(), &data, &len, 1) != 0)
        return false;
    why->assign(static_cast<const char *>(data), len);
    free(data);
    return true;
}

void tell_abort(kl_comm *c, int code);

// Gloo's rendezvous Store over a kl_store, with keys "<prefix>_<key>".
// Values are kept once read: Gloo may ask for a key it waited for.
class kl_gloo_store : public gloo::rendezvous::Store {
  public:
    explicit kl_gloo_store(kl_comm *c) : c_(c) {}

    void set(const std::string &key, const std::vector<char> &data) override
    {
        // Posted, as far as an abort can tell, before the store has it:
        // an abort from now on is told once this rank has connected.
        {
            std::lock_guard<std::mutex> lock(c_->mu);
            if (c_->failed.load())
                throw kl_error(KL_ECANCELED, "rendezvous: aborted");
            c_->posted = true;
        }
        kl_store *s = c_->dist->store;
        int rc = s->set(s->ctx, name(key).c_str(), data.data(), data.size());
        if (rc < 0) {
            std::lock_guard<std::mutex> lock(c_->mu);
            c_->posted = false;
            throw kl_error(rc, "rendezvous: cannot set " + name(key));
        }
    }

    std::vector<char> get(const std::string &key) override
    {
        wait({key}, c_->timeout);
        return got_[key];
    }

    void wait(const std::vector<std::string> &keys) override { wait(keys, c_->timeout); }

    void wait(const std::vector<std::string> &keys, const milliseconds &timeout) override
    {
        const auto deadline = Clock::now() + timeout;
        for (const auto &key : keys)
            fetch(key, deadline);
    }

  private:
    std::string name(const std::string &key) const { return c_->prefix + "_" + key; }

    void fetch(const std::string &key, Clock::time_point deadline)
    {
        kl_store *s = c_->dist->store;
        while (!got_.count(key)) {
            aborted();
            auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
            if (left <= 0)
                throw kl_error(KL_ETIMEDOUT, "rendezvous: " + name(key) + " never came (a rank is missing)");
            void *data = nullptr;
            size_t len = 0;
            int rc = s->get(s->ctx, name(key).c_str(), &data, &len,
                            (int)std::min<long long>(left, kStoreSliceMs));
            if (rc == 0) {
                const char *p = static_cast<const char *>(data);
                got_[key] = std::vector<char>(p, p + len);
                free(data);
            } else if (rc != KL_ETIMEDOUT) {
                throw kl_error(rc, "rendezvous: cannot get " + name(key));
            } else {
                given_up();
            }
        }
    }

    // Throws once this rank was aborted: at once while its address is not
    // posted; else once the others' have not all come within
    // kPostedAbortGraceMs (a rank is missing: nobody can be connecting to
    // this one), withdrawing the address and telling the others.
    void aborted()
    {
        int f = c_->failed.load();
        if (!f)
            return;
        if (c_->posted.load()) {
            if (aborted_at_ == Clock::time_point())
                aborted_at_ = Clock::now();
            if (Clock::now() - aborted_at_ < milliseconds(kPostedAbortGraceMs))
                return;
            {
                std::lock_guard<std::mutex> lock(c_->mu);
                c_->posted = false;
            }
            if (f != KL_ETIMEDOUT)
                tell_abort(c_, f);
        }
        throw kl_error(KL_ECANCELED, "rendezvous: aborted");
    }

    // A rank that failed before the mesh was up leaves no socket to close:
    // it says so under the abort key (comm_fail), which the others look
    // for between slices rather than wait for its keys until their timeout.
    void given_up()
    {
        std::string why;
        if (peer_gave_up(c_, &why))
            throw kl_error(KL_EBACKEND, "rendezvous: another rank gave up: " + why);
    }

    kl_comm *c_;
    std::map<std::string, std::vector<char>> got_;
    Clock::time_point aborted_at_{};
};

void err_set(kl_err *err, const char *msg)
{
    if (err)
        kl_err_set(err, NULL, "%s", msg);
}

// Tells the other ranks through the store (best effort) that this one gave
// up: one that waits in the rendezvous, or in a collective whose sockets
// never fail, stops now.
void tell_abort(kl_comm *c, int code)
{
    const char *say = code == KL_ECANCELED ? "cancelled" : "failed";
    kl_store *s = c->dist->store;
    s->set(s->ctx, (c->prefix + "_" + kAbortKey).c_str(), say, strlen(say));
}

// Fails the transport (if any) so that a blocked collective returns and the
// peers see their connections close.
void comm_fail(kl_comm *c, int code, const char *why)
{
    int none = 0;
    bool first = c->failed.compare_exchange_strong(none, code);
    // The first failure is told (tell_abort). A timeout is everyone's: not
    // told. A rank that posted its addresses but has not connected yet
    // tells once it has (kl_comm_open): the others, having every address,
    // are connecting to it, and would give up on the news and leave pairs
    // half set up. (The node's store retries a gateway that is away within
    // its own timeout: the failing rank may wait that long here.)
    bool tell;
    {
        std::lock_guard<std::mutex> lock(c->mu);
        tell = first && code != KL_ETIMEDOUT && (!c->posted.load() || c->connected);
    }
    if (tell)
        tell_abort(c, code);
    std::lock_guard<std::mutex> lock(c->mu);
    if (c->connected) {
        try {
            c->ctx->fail_all(why);
        } catch (...) {
            // The pairs failed already; nothing more to close.
        }
    }
}

// The KL_ code of an exception caught from Gloo during `what`, failing the
// communicator (so the peers fail now, not at their timeout).
int comm_caught(kl_comm *c, const char *what, const char *msg, int code, kl_err *err)
{
    if (c->failed.load() == KL_ECANCELED) {
        code = KL_ECANCELED;
    } else if (code == KL_EBACKEND && (strstr(msg, "imed out") || strstr(msg, "imeout"))) {
        code = KL_ETIMEDOUT;
    }
    comm_fail(c, code, msg);
    if (err) {
        if (code == KL_ECANCELED)
            kl_err_set(err, NULL, "%s: cancelled", what);
        else
            kl_err_set(err, NULL, "%s (rank %d of %d): %s", what, c->rank, c->size, msg);
    }
    return code;
}

// Gloo writes to sockets a dead peer may have reset: with SIGPIPE at its
// default, that write would kill the process instead of failing the
// collective. Blocked on every thread that calls in (a signal mask is per
// thread), it is also blocked on the device's event-loop thread, which
// kl_comm_open starts.
void block_sigpipe()
{
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
}

// Runs fn, mapping what it throws to a KL_ code.
template <typename F> int comm_call(kl_comm *c, const char *what, kl_err *err, F fn)
{
    block_sigpipe();
    int f = c->failed.load();
    if (f) {
        if (err)
            kl_err_set(err, NULL, "%s: the communicator %s", what,
                       f == KL_ECANCELED ? "was cancelled" : "failed earlier");
        return f;
    }
    try {
        fn();
        return 0;
    } catch (const kl_error &e) {
        return comm_caught(c, what, e.what(), e.code, err);
    } catch (const std::bad_alloc &) {
        return comm_caught(c, what, "out of memory", KL_ENOMEM, err);
    } catch (const std::exception &e) {
        return comm_caught(c, what, e.what(), KL_EBACKEND, err);
    } catch (...) {
        return comm_caught(c, what, "unknown error", KL_EBACKEND, err);
    }
}

// Wakes the waits of the collective in flight, once the communicator
// failed: each wake makes Gloo's algorithm go on to its next operation,
// which fails on the failed pairs and ends the collective.
void kick(kl_comm *c)
{
    std::lock_guard<std::mutex> lock(c->mu);
    if (c->inflight) {
        c->inflight->abortWaitSend();
        c->inflight->abortWaitRecv();
    }
}

// The watcher, until kl_comm_close: aborts on the run's cancel flag; on
// the first rank of each node of a multi-node world, aborts when another
// rank wrote the abort key; once failed, keeps waking the collective in
// flight until it ends.
void watch(kl_comm *c)
{
    const bool poll_abort = c->dist->nodes > 1 && c->rank % c->dist->local_ranks == 0;
    auto next_poll = Clock::now() + milliseconds(kAbortPollMs);
    std::unique_lock<std::mutex> lock(c->wmu);
    while (!c->stopping) {
        lock.unlock();
        if (c->failed.load()) {
            kick(c);
        } else if (c->cancel && __atomic_load_n(c->cancel, __ATOMIC_RELAXED)) {
            kl_comm_abort(c);
        } else if (poll_abort && Clock::now() >= next_poll) {
            std::string why;
            bool connected;
            {
                std::lock_guard<std::mutex> g(c->mu);
                connected = c->connected;
            }
            if (connected && peer_gave_up(c, &why))
                comm_fail(c, KL_EBACKEND, ("another rank gave up: " + why).c_str());
            next_poll = Clock::now() + milliseconds(kAbortPollMs);
        }
        lock.lock();
        if (!c->stopping)
            c->wcv.wait_for(lock, milliseconds(kCancelPollMs));
    }
}

// Marks out as the collective in flight for as long as it lives: declared
// after the options that own the buffer, it is gone before them.
struct inflight_guard {
    kl_comm *c;
    inflight_guard(kl_comm *comm, gloo::transport::UnboundBuffer *buf) : c(comm)
    {
        std::lock_guard<std::mutex> lock(c->mu);
        c->inflight = buf;
    }
    ~inflight_guard()
    {
        std::lock_guard<std::mutex> lock(c->mu);
        c->inflight = nullptr;
    }
};

template <typename T> gloo::AllreduceOptions::Func reduce_fn(kl_allreduce_op op)
{
    using fn = void (*)(void *, const void *, const void *, size_t);
    if (op == KL_ALLREDUCE_MAX)
        return static_cast<fn>(&gloo::max<T>);
    if (op == KL_ALLREDUCE_MIN)
        return static_cast<fn>(&gloo::min<T>);
    return static_cast<fn>(&gloo::sum<T>);
}

template <typename T> void allreduce_as(kl_comm *c, void *buf, int64_t count, kl_allreduce_op op)
{
    gloo::AllreduceOptions opts(c->ctx);
    auto out = c->ctx->createUnboundBuffer(buf, (size_t)count * sizeof(T));
    inflight_guard guard(c, out.get());
    opts.setOutput<T>(std::move(out));
    opts.setReduceFunction(reduce_fn<T>(op));
    opts.setTag(c->tag++);
    opts.setTimeout(c->timeout);
    gloo::allreduce(opts);
}

template <typename T> void broadcast_as(kl_comm *c, void *buf, int64_t count, int root)
{
    gloo::BroadcastOptions opts(c->ctx);
    auto out = c->ctx->createUnboundBuffer(buf, (size_t)count * sizeof(T));
    inflight_guard guard(c, out.get());
    opts.setOutput<T>(std::move(out));
    opts.setRoot(root);
    opts.setTag(c->tag++);
    opts.setTimeout(c->timeout);
    gloo::broadcast(opts);
}

int check_args(const kl_dist *dist, int rank, const char *prefix, kl_err *err)
{
    if (!dist || !dist->store || !dist->store->set || !dist->store->get || dist->nodes < 1 ||
        dist->local_ranks < 1 || dist->timeout_ms <= 0) {
        err_set(err, "kl_comm: a store, nodes >= 1, local_ranks >= 1 and timeout_ms > 0 are needed");
        return KL_EINVAL;
    }
    if (rank < 0 || (int64_t)rank >= (int64_t)dist->nodes * dist->local_ranks) {
        err_set(err, "kl_comm: rank out of the world");
        return KL_EINVAL;
    }
    if (!prefix || !*prefix || strlen(prefix) > 32 ||
        strspn(prefix, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-") != strlen(prefix)) {
        err_set(err, "kl_comm: the key prefix must be 1..32 characters of [A-Za-z0-9_.-]");
        return KL_EINVAL;
    }
    return 0;
}

} // namespace

extern "C" {

int kl_comm_available(void)
{
    return 1;
}

int kl_comm_open(const kl_dist *dist, int rank, const char *prefix, volatile int *cancel, kl_comm **out,
                 kl_err *err)
{
    *out = nullptr;
    int rc = check_args(dist, rank, prefix, err);
    if (rc < 0)
        return rc;
    kl_comm *c = new (std::nothrow) kl_comm;
    if (!c) {
        err_set(err, "kl_comm: out of memory");
        return KL_ENOMEM;
    }
    c->dist = dist;
    c->prefix = prefix;
    c->rank = rank;
    c->size = dist->nodes * dist->local_ranks;
    c->timeout = milliseconds(dist->timeout_ms);
    c->cancel = cancel;
    rc = comm_call(c, "rendezvous", err, [c]() {
        if (c->cancel || c->dist->nodes > 1)
            c->watcher = std::thread(watch, c);
        gloo::transport::tcp::attr attr(c->dist->host && *c->dist->host ? c->dist->host : "127.0.0.1");
        c->dev = gloo::transport::tcp::CreateDevice(attr);
        c->ctx = std::make_shared<comm_context>(c->rank, c->size);
        c->ctx->setTimeout(c->timeout);
        kl_gloo_store store(c);
        c->ctx->connect_mesh(store, c->dev);
        int failed;
        {
            std::lock_guard<std::mutex> lock(c->mu);
            c->connected = true;
            failed = c->failed.load();
        }
        // An abort that came while connecting found nothing to fail yet,
        // and was not told (comm_fail). The pairs are up on this side; a
        // peer's event loop may still be setting up its side of one, where
        // a reset ends its process (comm_context): it gets kSettleMs first.
        if (failed) {
            std::this_thread::sleep_for(milliseconds(kSettleMs));
            if (failed != KL_ETIMEDOUT)
                tell_abort(c, failed);
            throw kl_error(failed, "aborted");
        }
    });
    if (rc < 0) {
        kl_comm_close(c);
        return rc;
    }
    *out = c;
    return 0;
}

int kl_comm_rank(const kl_comm *c)
{
    return c->rank;
}

int kl_comm_size(const kl_comm *c)
{
    return c->size;
}

int kl_comm_allreduce(kl_comm *c, void *buf, int64_t count, kl_dtype dtype, kl_allreduce_op op, kl_err *err)
{
    if (count < 0 || (count > 0 && !buf)) {
        err_set(err, "kl_comm_allreduce: bad buffer");
        return KL_EINVAL;
    }
    if (count == 0)
        return 0;
    return comm_call(c, "all-reduce", err, [&]() {
        switch (dtype) {
        case KL_F32: allreduce_as<float>(c, buf, count, op); break;
        case KL_F64: allreduce_as<double>(c, buf, count, op); break;
        case KL_I32: allreduce_as<int32_t>(c, buf, count, op); break;
        }
    });
}

int kl_comm_broadcast(kl_comm *c, void *buf, int64_t count, kl_dtype dtype, int root, kl_err *err)
{
    if (count < 0 || (count > 0 && !buf) || root < 0 || root >= c->size) {
        err_set(err, "kl_comm_broadcast: bad buffer or root");
        return KL_EINVAL;
    }
    if (count == 0)
        return 0;
    return comm_call(c, "broadcast", err, [&]() {
        switch (dtype) {
        case KL_F32: broadcast_as<float>(c, buf, count, root); break;
        case KL_F64: broadcast_as<double>(c, buf, count, root); break;
        case KL_I32: broadcast_as<int32_t>(c, buf, count, root); break;
        }
    });
}

int kl_comm_barrier(kl_comm *c, kl_err *err)
{
    return comm_call(c, "barrier", err, [c]() {
        gloo::BarrierOptions opts(c->ctx);
        opts.setTag(c->tag++);
        opts.setTimeout(c->timeout);
        gloo::barrier(opts);
    });
}

void kl_comm_abort(kl_comm *c)
{
    if (c)
        comm_fail(c, KL_ECANCELED, "kl_comm: aborted");
}

void kl_comm_close(kl_comm *c)
{
    if (!c)
        return;
    {
        std::lock_guard<std::mutex> lock(c->wmu);
        c->stopping = true;
    }
    c->wcv.notify_all();
    if (c->watcher.joinable())
        c->watcher.join();
    try {
        // Resets the connections (SO_LINGER 0): a peer still waiting on this
        // rank fails at once instead of at its timeout.
        if (c->ctx && c->connected)
            c->ctx->closeConnections();
        c->ctx.reset();
        c->dev.reset();
    } catch (...) {
        // Closing a failed transport may throw; it is going away anyway.
    }
    delete c;
}

} // extern "C"
