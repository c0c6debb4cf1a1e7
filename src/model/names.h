/* Canonical tensor names to a file's names (names.c). */
#ifndef HR_MODEL_NAMES_H
#define HR_MODEL_NAMES_H

#include "model/arch.h"
#include "model/weights.h"

/* The tensor the binder calls `name`: that name, else the family's alias
 * (a: the arch, may be NULL), else without the "model." prefix. NULL when
 * absent. */
const hr_tensor *hr__weights_lookup(const hr_weights *w, const hr_arch *a, const char *name);

#endif
