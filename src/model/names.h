/* Canonical tensor names to a file's names (names.c). */
#ifndef HR_MODEL_NAMES_H
#define HR_MODEL_NAMES_H

#include "model/arch.h"
#include "model/weights.h"

/* The tensor the binder calls `name`: that name, else the family's alias
 * (a: the arch, may be NULL), else without the "model." prefix. NULL when
 * absent. */
const hr_tensor *hr__weights_lookup(const hr_weights *w, const hr_arch *a, const char *name);

/* The image side's layouts (names.c says which checkpoints use each):
 * prefixes of the vision tower's and of the projector's tensor names,
 * NULL-terminated, in the order tried. */
extern const char *const hr__vision_tower_prefixes[];
extern const char *const hr__mm_projector_prefixes[];
extern const char *const hr__qwen_visual_prefixes[];

/* The first of prefixes under which w has the tensor `probe` (prefix +
 * probe), NULL when none has it: a checkpoint's layout, decided once so
 * that one component's tensors are all read under one prefix. */
const char *hr__weights_prefix(const hr_weights *w, const char *const *prefixes,
                               const char *probe);

#endif
