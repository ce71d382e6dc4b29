/* lease.h — nodes' lease polls held by this gateway. A node asks for up to
 * max runs; its poll is suspended (no thread waits on it) until runs
 * claimed for the node, or cancels of its runs, are there to hand out, or
 * until its wait ends. One thread looks for work for the polls that need a
 * look: at once when woken (the scheduler claimed for that node here, a
 * cancel was asked here, the node's free slots grew), the longest woken
 * first; and periodically for what another gateway did: every 500 ms while
 * another gateway holds the scheduler lock, every 5 s while this one does
 * (its own claims and cancels wake the polls they concern). A run the
 * scheduler claims here for a node whose poll is held here (or was just
 * answered) needs no look: the claim hands it over (gw_leases_hold,
 * gw_leases_hand) and the thread answers the poll from memory. */
#ifndef GW_LEASE_H
#define GW_LEASE_H

#include <stdint.h>

#include "gw.h"
#include "store.h"
#include "svc_http.h"

typedef struct gw_leases gw_leases;

/* Starts the thread. NULL on failure. */
gw_leases *gw_leases_start(gw_app *app);
/* Answers every held poll with nothing and stops the thread; polls from
 * now on are answered 503 at once. NULL is a no-op. */
void gw_leases_stop(gw_leases *l);
/* Stops (if not yet) and frees l, once no handler can call it any more;
 * NULL is a no-op. */
void gw_leases_free(gw_leases *l);

/* Takes over req, the poll of node_id (a UUID) for up to max runs waiting
 * up to wait_ms, sent when seq of the node's runs had ended: suspends it and
 * answers it later with {"runs": [...], "cancel": [...]}. A poll the node
 * still had here is answered empty. Returns 0, or -1 after answering req
 * itself (503 while stopping). */
int gw_leases_poll(gw_leases *l, svc_req *req, const char *node_id, int max, uint64_t seq,
                   int wait_ms);
/* node_id may have something to take (claimed runs for it here, a
 * cancel): its poll held here looks now. */
void gw_leases_wake(gw_leases *l, const char *node_id, int claimed);
/* The scheduler is about to claim job_id for node_id: 1 when this gateway
 * holds node_id's poll (or answered it within the last second: the next
 * one is on its way), and then it keeps a place for the run, the claim
 * hands the run over (gw_claim.hand: leased by the claim itself, with no
 * lease look) and gw_leases_hand must follow whatever the claim's outcome;
 * 0 when it does not (the claim wakes the poll: gw_leases_wake). 0 for a
 * NULL l. */
int gw_leases_hold(gw_leases *l, const char *node_id, const char *job_id);
/* The claim of job_id that gw_leases_hold kept a place for is done: run,
 * its lease record, goes in the node's next answer from here (the poll held
 * now, or the node's next one), before any cancel of it; attempt > 0 and
 * run NULL: claimed (so leased) but not readable, taken back at once
 * (gw_store_runs_unhand); attempt 0: not claimed, the place is dropped. A
 * run no answer here took within LEASE_HAND_MS is taken back to the claimed
 * runs any gateway's look hands out. */
void gw_leases_hand(gw_leases *l, const char *job_id, int attempt, const gw_dispatch *run);
/* node_id reported free_slots when seq of its runs had ended: its poll
 * held here, or the next one if sent before that, asks for that many from
 * now on (the newest report wins). */
void gw_leases_set_room(gw_leases *l, const char *node_id, int free_slots, uint64_t seq);
/* This gateway took (1) or lost (0) the scheduler lock: the periodic look
 * becomes rare (or frequent again). NULL l is a no-op. */
void gw_leases_set_leading(gw_leases *l, int leading);
/* node_id left: its poll held here is answered at once, and its last
 * report forgotten. */
void gw_leases_end(gw_leases *l, const char *node_id);
/* node_id (re)registered: what its last report said is forgotten (a new
 * process counts its ended runs from 0 again). NULL l is a no-op. */
void gw_leases_forget(gw_leases *l, const char *node_id);

#endif
