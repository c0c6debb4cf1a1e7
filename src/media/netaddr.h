/* Address classes for the media fetch's SSRF guard: which resolved
 * addresses a server may connect to on a client's behalf. */
#ifndef HR_MEDIA_NETADDR_H
#define HR_MEDIA_NETADDR_H

#include <stdbool.h>
#include <stdint.h>

struct sockaddr;

typedef enum hr_addr_class {
    HR_ADDR_PUBLIC,      /* globally routable: allowed */
    HR_ADDR_PRIVATE,     /* 10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7, fec0::/10 */
    HR_ADDR_LOOPBACK,    /* 127/8, ::1 */
    HR_ADDR_LINK_LOCAL,  /* 169.254/16 (cloud metadata), fe80::/10 */
    HR_ADDR_MULTICAST,   /* 224/4, ff00::/8 */
    HR_ADDR_UNSPECIFIED, /* 0/8, :: */
    HR_ADDR_RESERVED,    /* documentation, benchmarking, 240/4, broadcast, 100::/64, ... */
} hr_addr_class;

/* The class of a v4 address (a: network byte order, 4 bytes). */
hr_addr_class hr_addr_classify_v4(const uint8_t a[4]);
/* The class of a v6 address (16 bytes). v4-mapped (::ffff:a.b.c.d),
 * v4-compatible (::a.b.c.d), NAT64 (64:ff9b::/96) and 6to4 (2002::/16)
 * addresses are the class of the v4 address they carry. */
hr_addr_class hr_addr_classify_v6(const uint8_t a[16]);
/* AF_INET / AF_INET6 socket addresses; any other family is RESERVED. */
hr_addr_class hr_addr_classify(const struct sockaddr *sa);

/* "private", "loopback", ... ("public" for HR_ADDR_PUBLIC). */
const char *hr_addr_class_name(hr_addr_class c);

#endif
