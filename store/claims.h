/* claims.h — runs that share one database share its work: a run claims a sample (a row of table claims) before
 * computing it, and a second run on the same file takes the samples nobody holds, then waits for the others'
 * (runs/sweep.c; docs/database.md "claims").
 *
 * A claim names its process: host, pid and the process's start time (so a pid the system gave to a new process
 * is not mistaken for the claimant). It holds while that process lives: on the claimant's host a claim whose
 * process is gone (kill -9 included) is taken over at once; a claim from another host, whose process cannot be
 * looked at, holds until its lease expires. The lease is renewed by a heartbeat thread with its own connection
 * while the run lives, so a claim of a crashed run on another host is free CLAIM_LEASE_S seconds after its last
 * heartbeat. A claim is released when its sample's rows are written. Claims are not copied by a merge.
 * Assumed: a host name names one process table (two containers of one name that cannot see each other's processes
 * would take over each other's claims: the sample is then computed twice, its rows kept once), and hosts that
 * share a database keep their clocks within a minute or so of each other (leases compare wall-clock times). */
#ifndef KVBENCH_STORE_CLAIMS_H
#define KVBENCH_STORE_CLAIMS_H

#include "../engine/err.h"
#include "store.h"

/* Seconds a claim holds past its claimant's last heartbeat, and the heartbeat's period. */
#define CLAIM_LEASE_S 300
#define CLAIM_HEARTBEAT_S 30

typedef struct {
    char host[256];
    long long pid;
    long long process_start; /* the process's start time (/proc/PID/stat field 22, clock ticks since boot); 0 when
                              * the system does not say */
} Claimant;

/* This process. */
void claims_self(Claimant *me);

/* Claims (model, setup, sample_key) for `me`: *taken = 1 when the sample was free, held by `me` already, or held by
 * a claimant that is gone (same host, process ended) or whose lease ended; 0 when another live run holds it. */
int claims_take(Store *s, const Claimant *me, const char *model, const char *setup, const char *sample_key,
                int *taken, KvErr *err);
/* Releases me's claim of the sample (none held: nothing happens). */
int claims_release(Store *s, const Claimant *me, const char *model, const char *setup, const char *sample_key,
                   KvErr *err);

/* The heartbeat: a thread that renews every lease of `me` in the database db_path every CLAIM_HEARTBEAT_S
 * seconds until claims_heartbeat_stop. */
typedef struct ClaimsHeartbeat ClaimsHeartbeat;
int claims_heartbeat_start(ClaimsHeartbeat **out, const char *db_path, const Claimant *me, KvErr *err);
void claims_heartbeat_stop(ClaimsHeartbeat *hb);

#endif
