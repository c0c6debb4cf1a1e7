/* Logging to stderr with a process-wide level. */
#ifndef HR_CORE_LOG_H
#define HR_CORE_LOG_H

typedef enum hr_log_level {
    HR_LOG_DEBUG,
    HR_LOG_INFO,
    HR_LOG_WARN,
    HR_LOG_ERROR,
} hr_log_level;

void hr_log_set_level(hr_log_level level);
/* Parse "debug"/"info"/"warning"/"error" (mlx_lm.server's --log-level names,
 * case-insensitive); returns -1 on an unknown name. */
int hr_log_parse_level(const char *name);
void hr_log(hr_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
