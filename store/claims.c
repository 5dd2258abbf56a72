/* claims.c — the claims table: which run computes which sample now, so that runs sharing a database share its
 * work (claims.h). Every claim is taken in a BEGIN IMMEDIATE transaction: of two runs reaching one sample at once,
 * the second sees the first's claim. */
#include "claims.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Kept apart from the store's schema: a claim is not a result (a merge does not copy it, a report never reads it),
 * and a database without the table (older, or read-only) needs none. */
static const char *CLAIMS_TABLE =
    "CREATE TABLE IF NOT EXISTS claims(\n"
    "  model TEXT NOT NULL, setup TEXT NOT NULL, sample_key TEXT NOT NULL,\n"
    "  host TEXT NOT NULL, pid INTEGER NOT NULL, process_start INTEGER NOT NULL, lease_until REAL NOT NULL,\n"
    "  PRIMARY KEY(model, setup, sample_key)) STRICT";

/* The start time of process pid (field 22 of /proc/PID/stat, after the parenthesised command name, which may hold
 * spaces); 0 when it cannot be read. */
static long long process_start(long long pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%lld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    for (int field = 2; p && field < 22; field++) p = strchr(p + 1, ' ');
    return p ? atoll(p + 1) : 0;
}

void claims_self(Claimant *me) {
    memset(me, 0, sizeof *me);
    if (gethostname(me->host, sizeof me->host - 1)) snprintf(me->host, sizeof me->host, "unknown");
    me->pid = (long long)getpid();
    me->process_start = process_start(me->pid);
}

/* A claimant on this host whose process ended (or whose pid now belongs to a process started later). */
static int gone(const Claimant *c) {
    if (kill((pid_t)c->pid, 0) && errno == ESRCH) return 1;
    long long started = process_start(c->pid);
    return c->process_start && started && started != c->process_start;
}

static int fail(Store *s, KvErr *err, const char *what) {
    return kv_fail(err, "%s: %s: %s", store_path(s), what, sqlite3_errmsg(store_handle(s)));
}

static void bind_claim(sqlite3_stmt *st, const char *model, const char *setup, const char *key) {
    sqlite3_bind_text(st, 1, model, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, setup, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, key, -1, SQLITE_STATIC);
}

static void bind_claimant(sqlite3_stmt *st, int first, const Claimant *me) {
    sqlite3_bind_text(st, first, me->host, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, first + 1, me->pid);
    sqlite3_bind_int64(st, first + 2, me->process_start);
}

/* Whether the claim of (model, setup, key) is held by a live claimant other than me. */
static int held_by_other(Store *s, const Claimant *me, const char *model, const char *setup, const char *key,
                         int *held, KvErr *err) {
    sqlite3_stmt *st;
    *held = 0;
    if (sqlite3_prepare_v2(store_handle(s), "SELECT host, pid, process_start, lease_until FROM claims WHERE model = ? "
                                            "AND setup = ? AND sample_key = ?", -1, &st, NULL) != SQLITE_OK)
        return fail(s, err, "reading the claims");
    bind_claim(st, model, setup, key);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        Claimant c = {{0}, sqlite3_column_int64(st, 1), sqlite3_column_int64(st, 2)};
        snprintf(c.host, sizeof c.host, "%s", (const char *)sqlite3_column_text(st, 0));
        int same_host = !strcmp(c.host, me->host);
        int mine = same_host && c.pid == me->pid && c.process_start == me->process_start;
        *held = !mine && sqlite3_column_double(st, 3) > (double)time(NULL) && !(same_host && gone(&c));
    }
    sqlite3_finalize(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : fail(s, err, "reading the claims");
}

int claims_take(Store *s, const Claimant *me, const char *model, const char *setup, const char *sample_key,
                int *taken, KvErr *err) {
    sqlite3 *db = store_handle(s);
    sqlite3_stmt *st = NULL;
    int held = 0, rc;
    *taken = 0;
    if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) return fail(s, err, "claiming a sample");
    rc = sqlite3_exec(db, CLAIMS_TABLE, NULL, NULL, NULL) != SQLITE_OK ? fail(s, err, "creating the claims table") : 0;
    if (!rc) rc = held_by_other(s, me, model, setup, sample_key, &held, err);
    if (!rc && !held) {
        if (sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO claims VALUES(?,?,?,?,?,?,?)", -1, &st, NULL) != SQLITE_OK)
            rc = fail(s, err, "claiming a sample");
        else {
            bind_claim(st, model, setup, sample_key);
            bind_claimant(st, 4, me);
            sqlite3_bind_double(st, 7, (double)time(NULL) + CLAIM_LEASE_S);
            if (sqlite3_step(st) != SQLITE_DONE) rc = fail(s, err, "claiming a sample");
            sqlite3_finalize(st);
        }
    }
    if (!rc && sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) rc = fail(s, err, "claiming a sample");
    if (rc) sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    else *taken = !held;
    return rc;
}

int claims_release(Store *s, const Claimant *me, const char *model, const char *setup, const char *sample_key,
                   KvErr *err) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(store_handle(s), "DELETE FROM claims WHERE model = ? AND setup = ? AND sample_key = ? AND "
                                            "host = ? AND pid = ? AND process_start = ?", -1, &st, NULL) != SQLITE_OK)
        return fail(s, err, "releasing a claim");
    bind_claim(st, model, setup, sample_key);
    bind_claimant(st, 4, me);
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : fail(s, err, "releasing a claim");
}

/* ---------------------------------------------------------------- heartbeat */

struct ClaimsHeartbeat {
    sqlite3 *db;            /* its own connection: the sweep's is used by the sweep's thread */
    Claimant me;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int stop;
};

/* Renews me's leases; a renewal that fails (the database busy for longer than its timeout) is tried again at the
 * next beat: a lapsed lease only lets another host's run compute the sample too. */
static void renew(ClaimsHeartbeat *hb) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(hb->db, "UPDATE claims SET lease_until = ?4 WHERE host = ?1 AND pid = ?2 AND "
                                   "process_start = ?3", -1, &st, NULL) != SQLITE_OK)
        return;
    bind_claimant(st, 1, &hb->me);
    sqlite3_bind_double(st, 4, (double)time(NULL) + CLAIM_LEASE_S);
    sqlite3_step(st);
    sqlite3_finalize(st);
}

static void *beat(void *arg) {
    ClaimsHeartbeat *hb = arg;
    pthread_mutex_lock(&hb->lock);
    while (!hb->stop) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += CLAIM_HEARTBEAT_S;
        while (!hb->stop && pthread_cond_timedwait(&hb->wake, &hb->lock, &until) != ETIMEDOUT) {}
        if (hb->stop) break;
        pthread_mutex_unlock(&hb->lock);
        renew(hb);
        pthread_mutex_lock(&hb->lock);
    }
    pthread_mutex_unlock(&hb->lock);
    return NULL;
}

int claims_heartbeat_start(ClaimsHeartbeat **out, const char *db_path, const Claimant *me, KvErr *err) {
    *out = NULL;
    ClaimsHeartbeat *hb = kv_calloc(1, sizeof *hb, err);
    if (!hb) return -1;
    hb->me = *me;
    if (sqlite3_open_v2(db_path, &hb->db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK ||
        sqlite3_busy_timeout(hb->db, 30000) != SQLITE_OK ||
        sqlite3_exec(hb->db, CLAIMS_TABLE, NULL, NULL, NULL) != SQLITE_OK) {
        kv_fail(err, "%s: cannot keep the run's claims alive: %s", db_path,
                hb->db ? sqlite3_errmsg(hb->db) : "out of memory");
        sqlite3_close(hb->db);
        free(hb);
        return -1;
    }
    pthread_mutex_init(&hb->lock, NULL);
    pthread_cond_init(&hb->wake, NULL);
    if (pthread_create(&hb->thread, NULL, beat, hb)) {
        kv_fail(err, "%s: cannot start the claims' heartbeat: %s", db_path, strerror(errno));
        pthread_mutex_destroy(&hb->lock);
        pthread_cond_destroy(&hb->wake);
        sqlite3_close(hb->db);
        free(hb);
        return -1;
    }
    *out = hb;
    return 0;
}

void claims_heartbeat_stop(ClaimsHeartbeat *hb) {
    if (!hb) return;
    pthread_mutex_lock(&hb->lock);
    hb->stop = 1;
    pthread_cond_signal(&hb->wake);
    pthread_mutex_unlock(&hb->lock);
    pthread_join(hb->thread, NULL);
    pthread_mutex_destroy(&hb->lock);
    pthread_cond_destroy(&hb->wake);
    sqlite3_close(hb->db);
    free(hb);
}
