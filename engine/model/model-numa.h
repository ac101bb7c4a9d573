/* engine/model/model-numa.h: --numa around a model's load (issue 16).
 *
 *   struct host_numa_report rep;
 *   model_numa_prepare(path, "auto", pool, -1, &rep, &err);  // decide + bind, before model_load
 *   struct model *m = model_load(path, &mp, &err);           // the arena is first-touched
 *   model_numa_finish(m, pool, &rep, &err);                  // file pages placed, report published
 *   fprintf(stderr, "numa: %s\n", rep.plan.why);
 *
 * prepare samples where the page cache holds the file's tensor data (mincore
 * + move_pages, numa_maps where refused), decides (host_numa_decide) and
 * binds the pool (host_numa_apply): the load that follows then copies the
 * weight arena on the threads that compute it, so its pages land on their
 * node by first touch (split: each group copies its own rows). finish
 * places weights left in the file (models too big to copy) with
 * host_numa_place_file_pages: each matrix's rows cut where the pool cuts
 * them. A refused binding is not an error: the report's note says so and
 * everything runs unbound. Only a bad --numa value or a node:N the process
 * may not use fails.
 *
 * The calling thread is bound as the pool's participant 0, so threads it
 * creates afterwards inherit its mask (the daemon's scheduler thread, which
 * dispatches on the pool from then on, does).
 *
 * Threading: the pool's dispatching thread (the loader). */
#ifndef STRATA_MODEL_NUMA_H
#define STRATA_MODEL_NUMA_H

#include <stdbool.h>

#include "engine/core/error.h"
#include "engine/host/numa.h"

struct model;
struct pool;

/* mode: the --numa text (NULL = auto); gpu_node: kernel node of the GPU in
 * use or -1. ops NULL: the real calls. */
int model_numa_prepare(const char *path, const char *mode, struct pool *pool, int gpu_node,
                       const struct host_numa_ops *ops, struct host_numa_report *rep,
                       struct strata_error *err);
/* The gpu_node of model_numa_prepare for the GPU in use at pci (its
 * VK_EXT_pci_bus_info address): the kernel node local to it in this
 * process's topology, or -1 (not found, no locality, NULL pci: no GPU).
 *   model_numa_prepare(path, mode, pool, model_numa_gpu_node(&pci), NULL, &rep, &err); */
int model_numa_gpu_node(const struct host_numa_pci *pci);
/* force: re-read every span even when placed (measurement). */
int model_numa_finish(const struct model *m, struct pool *pool, const struct host_numa_ops *ops,
                      bool force, struct host_numa_report *rep, struct strata_error *err);
/* The report as one start-up line ("nodes 2; binding ...; placement ..."). */
void model_numa_line(const struct host_numa_report *rep, char *buf, size_t cap);

#endif
