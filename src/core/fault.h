/* Fault injection for tests: fail the Nth allocation or file write, or
 * fault a kernel in the Nth forward step on a GPU (its context is lost).
 *
 * HEARTH_FAULT=alloc:N, write:N or device:N (read once, on the first hr_fault_arm_env
 * call) arms the switch; so does hr_fault_set from a test. Once armed, the
 * Nth event counted from that moment fails, once; the ones after succeed.
 * Events count across threads. Loading is excepted by arming after it: the
 * server and the CLI arm the environment's switch once the model is loaded.
 * Unarmed, hr_fault_hit is one relaxed atomic load. HEARTH_FAULT_TRACE=1
 * prints a backtrace where the fault fires (link with -rdynamic for names). */
#ifndef HR_CORE_FAULT_H
#define HR_CORE_FAULT_H

#include <stdbool.h>

typedef enum hr_fault_kind {
    HR_FAULT_ALLOC,
    HR_FAULT_WRITE,
    HR_FAULT_DEVICE,
    HR_FAULT_N
} hr_fault_kind;

/* Arm kind: the nth event from now (1-based) fails; n <= 0 disarms it. */
void hr_fault_set(hr_fault_kind k, long n);
/* Arm what HEARTH_FAULT asks for (nothing when unset); a malformed value is
 * ignored with a warning. */
void hr_fault_arm_env(void);
/* Count one event of kind k; true when this one must fail. */
bool hr_fault_hit(hr_fault_kind k);
/* Events of kind k counted since it was armed; whether its fault fired. */
long hr_fault_count(hr_fault_kind k);
bool hr_fault_fired(hr_fault_kind k);

#endif
