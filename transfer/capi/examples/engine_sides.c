/* An engine's prefill and decode sides on the pdx C API, in push mode (docs/protocols.md "pdx
 * engines"): each side allocates its KV pool through the core, publishes its descriptor on its
 * side channel (here a file in DIR; pdsim serves GET /internal/pdx/descriptor), and adds the
 * other's. The decode registers the blocks it wants written (a Register note); the prefill
 * writes its blocks into them with a Done note that the core sends only after the data landed;
 * the decode verifies the bytes before it would generate.
 *
 *   engine_sides both [tcp|shm]      forks: the child is the decode, the parent the prefill
 *   engine_sides prefill|decode DIR [tcp|shm]
 * Exit 0 when the decode verified every byte. Built and run by ctest (pdx_capi_engine_sides). */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "pdx/pdx.h"

enum { kBlocks = 8, kBlockBytes = 4096, kPromptBlocks = 3 };
static const uint64_t kTransferId = 0x5eed; /* pdx_id("xfer-...") in a real engine */

static unsigned char pattern(uint32_t block, size_t i) {
    return (unsigned char)(block * 31 + i);
}

static pdx_agent_t* start(const char* name, const char* tls, uint32_t* layout) {
    pdx_config_t cfg;
    pdx_config_init(&cfg);
    cfg.name = name; /* the engine id: a restarted engine is the next generation */
    cfg.transports = tls;
    cfg.net_devices = strcmp(tls, "tcp") == 0 ? "lo" : NULL;
    pdx_agent_t* a = NULL;
    uint32_t region = 0;
    if (pdx_agent_create(&cfg, &a) != PDX_OK ||
        pdx_allocate_region(a, (size_t)kBlocks * kBlockBytes, &region) != PDX_OK) {
        fprintf(stderr, "%s: %s\n", name, pdx_last_error());
        exit(2);
    }
    pdx_layout_t l = {region, 0, kBlockBytes, 0, kBlocks};
    pdx_add_layout(a, &l, layout);
    return a;
}

/* The side channel: publish our descriptor, then wait for the other side's and add it. */
static uint64_t exchange(pdx_agent_t* a, const char* dir, const char* me, const char* other) {
    unsigned char blob[65536];
    size_t size = 0;
    char path[512], tmp[520];
    pdx_descriptor(a, blob, sizeof blob, &size);
    snprintf(path, sizeof path, "%s/%s.desc", dir, me);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE* f = fopen(tmp, "wb");
    fwrite(blob, 1, size, f);
    fclose(f);
    rename(tmp, path); /* whole or absent */
    snprintf(path, sizeof path, "%s/%s.desc", dir, other);
    for (int i = 0; i < 5000; ++i, usleep(1000)) { /* bounded: 5 s */
        f = fopen(path, "rb");
        if (f) {
            break;
        }
    }
    if (!f) {
        fprintf(stderr, "%s: no descriptor from %s\n", me, other);
        exit(2);
    }
    size = fread(blob, 1, sizeof blob, f);
    fclose(f);
    uint64_t peer = 0;
    if (pdx_add_peer(a, blob, size, &peer) != PDX_OK) {
        fprintf(stderr, "%s: add_peer: %s\n", me, pdx_last_error());
        exit(2);
    }
    return peer;
}

/* Waits (bounded) for one note of transfer kTransferId. */
static int wait_note(pdx_agent_t* a, pdx_received_notification_t* n) {
    for (int i = 0; i < 10000; ++i, usleep(1000)) {
        if (pdx_drain_notifications(a, n, 1) == 1 && n->transfer_id == kTransferId) {
            return 1;
        }
    }
    return 0;
}

static int prefill(const char* dir, const char* tls) {
    uint32_t layout = 0;
    pdx_agent_t* a = start("engine-p", tls, &layout);
    uint64_t decode = exchange(a, dir, "prefill", "decode");
    uint32_t src[kPromptBlocks], dst[kPromptBlocks];
    for (uint32_t b = 0; b < kPromptBlocks; ++b) { /* the prompt's KV, computed */
        unsigned char* p = pdx_block(a, layout, b, NULL);
        for (size_t i = 0; i < kBlockBytes; ++i) {
            p[i] = pattern(b, i);
        }
        src[b] = b;
    }
    pdx_received_notification_t reg;
    if (!wait_note(a, &reg) || reg.kind != PDX_NOTIFY_REGISTER) {
        fprintf(stderr, "prefill: no Register\n");
        return 1;
    }
    /* Register payload: the decode's layout id and block ids, "L:a,b,c" (pdsim uses JSON). */
    uint32_t remote_layout = (uint32_t)strtoul((const char*)reg.payload, NULL, 10);
    const char* ids = strchr((const char*)reg.payload, ':');
    for (uint32_t b = 0; b < kPromptBlocks && ids; ++b) {
        dst[b] = (uint32_t)strtoul(ids + 1, NULL, 10);
        ids = strchr(ids + 1, ',');
    }
    pdx_notification_t done = {PDX_NOTIFY_DONE, kTransferId, 0, 1, PDX_OK, NULL, 0};
    uint64_t h = 0;
    pdx_status_t s = pdx_write_blocks(a, decode, layout, src, remote_layout, dst, kPromptBlocks,
                                      kTransferId, 5000, &done, &h);
    if (s == PDX_OK) {
        s = pdx_wait(a, h, 10000);
    }
    printf("prefill: write %s\n", pdx_status_string(s));
    usleep(200000);       /* let the decode read its Done before this peer goes */
    pdx_agent_destroy(a); /* frees the prefill's blocks */
    return s == PDX_OK ? 0 : 1;
}

static int decode(const char* dir, const char* tls) {
    uint32_t layout = 0;
    pdx_agent_t* a = start("engine-d", tls, &layout);
    uint64_t prefill_peer = exchange(a, dir, "decode", "prefill");
    const uint32_t mine[kPromptBlocks] = {5, 6, 7}; /* free blocks of the decode's pool */
    char payload[64];
    int n = snprintf(payload, sizeof payload, "%u:%u,%u,%u", layout, mine[0], mine[1], mine[2]);
    pdx_notification_t reg = {PDX_NOTIFY_REGISTER, kTransferId, 0, 1, PDX_OK, payload,
                              (size_t)n + 1};
    if (pdx_notify(a, prefill_peer, &reg) != PDX_OK) {
        fprintf(stderr, "decode: Register: %s\n", pdx_last_error());
        return 1;
    }
    pdx_received_notification_t note;
    if (!wait_note(a, &note) || note.kind != PDX_NOTIFY_DONE) {
        fprintf(stderr, "decode: no Done (a Failed, or nothing)\n");
        return 1;
    }
    for (uint32_t b = 0; b < kPromptBlocks; ++b) { /* never generate from unverified KV */
        const unsigned char* p = pdx_block(a, layout, mine[b], NULL);
        for (size_t i = 0; i < kBlockBytes; ++i) {
            if (p[i] != pattern(b, i)) {
                fprintf(stderr, "decode: block %u byte %zu is wrong\n", mine[b], i);
                return 1;
            }
        }
    }
    printf("decode: %d blocks verified\n", kPromptBlocks);
    pdx_agent_destroy(a);
    return 0;
}

int main(int argc, char** argv) {
    if (argc >= 2 && strcmp(argv[1], "both") == 0) {
        const char* tls = argc >= 3 && strcmp(argv[2], "shm") == 0 ? "posix,self" : "tcp";
        char dir[] = "/tmp/pdx-engine-XXXXXX";
        if (!mkdtemp(dir)) {
            return 2;
        }
        pid_t child = fork();
        if (child == 0) {
            _exit(decode(dir, tls));
        }
        int p = prefill(dir, tls), status = 0;
        waitpid(child, &status, 0);
        char cmd[64];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        if (system(cmd) != 0) {
            return 2;
        }
        return p == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
    }
    if (argc >= 3) {
        const char* tls = argc >= 4 && strcmp(argv[3], "shm") == 0 ? "posix,self" : "tcp";
        return strcmp(argv[1], "prefill") == 0 ? prefill(argv[2], tls) : decode(argv[2], tls);
    }
    fprintf(stderr, "usage: engine_sides both [tcp|shm] | prefill|decode DIR [tcp|shm]\n");
    return 2;
}
