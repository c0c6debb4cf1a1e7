/* The SSRF guard's address classes (media/netaddr.h): RFC 6890's special
 * purpose registries, v4 and v6, with v4 carried inside v6 unwrapped. */
#include "media/netaddr.h"

#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

/* a/len within net (bytes of the prefix, bits beyond them zero) */
static bool in_prefix(const uint8_t *a, const uint8_t *net, int bits) {
    int whole = bits / 8, rest = bits % 8;
    if (memcmp(a, net, (size_t)whole))
        return false;
    if (!rest)
        return true;
    uint8_t mask = (uint8_t)(0xff << (8 - rest));
    return (a[whole] & mask) == (net[whole] & mask);
}

typedef struct range {
    uint8_t net[16];
    int bits;
    hr_addr_class cls;
} range;

static const range V4[] = {
    {{0, 0, 0, 0}, 8, HR_ADDR_UNSPECIFIED},      /* "this network" */
    {{10, 0, 0, 0}, 8, HR_ADDR_PRIVATE},
    {{100, 64, 0, 0}, 10, HR_ADDR_PRIVATE},      /* carrier-grade NAT */
    {{127, 0, 0, 0}, 8, HR_ADDR_LOOPBACK},
    {{169, 254, 0, 0}, 16, HR_ADDR_LINK_LOCAL},
    {{172, 16, 0, 0}, 12, HR_ADDR_PRIVATE},
    {{192, 0, 0, 0}, 24, HR_ADDR_RESERVED},      /* IETF protocol assignments */
    {{192, 0, 2, 0}, 24, HR_ADDR_RESERVED},      /* TEST-NET-1 */
    {{192, 88, 99, 0}, 24, HR_ADDR_RESERVED},    /* 6to4 relay anycast */
    {{192, 168, 0, 0}, 16, HR_ADDR_PRIVATE},
    {{198, 18, 0, 0}, 15, HR_ADDR_RESERVED},     /* benchmarking */
    {{198, 51, 100, 0}, 24, HR_ADDR_RESERVED},   /* TEST-NET-2 */
    {{203, 0, 113, 0}, 24, HR_ADDR_RESERVED},    /* TEST-NET-3 */
    {{224, 0, 0, 0}, 4, HR_ADDR_MULTICAST},
    {{240, 0, 0, 0}, 4, HR_ADDR_RESERVED},       /* incl. 255.255.255.255 */
};

static const range V6[] = {
    {{0xfe, 0x80}, 10, HR_ADDR_LINK_LOCAL},
    {{0xfe, 0xc0}, 10, HR_ADDR_PRIVATE},          /* site-local (deprecated) */
    {{0xfc}, 7, HR_ADDR_PRIVATE},                 /* unique local */
    {{0xff}, 8, HR_ADDR_MULTICAST},
    {{0x20, 0x01, 0x0d, 0xb8}, 32, HR_ADDR_RESERVED}, /* documentation */
    {{0x01, 0x00}, 64, HR_ADDR_RESERVED},         /* discard-only */
    {{0x20, 0x01, 0x00, 0x00}, 32, HR_ADDR_RESERVED}, /* Teredo: the v4 inside is obfuscated */
    {{0x20, 0x01, 0x00, 0x10}, 28, HR_ADDR_RESERVED}, /* ORCHID */
    {{0x3f, 0xfe}, 16, HR_ADDR_RESERVED},         /* 6bone (returned) */
};

hr_addr_class hr_addr_classify_v4(const uint8_t a[4]) {
    for (size_t i = 0; i < sizeof V4 / sizeof V4[0]; i++)
        if (in_prefix(a, V4[i].net, V4[i].bits))
            return V4[i].cls;
    return HR_ADDR_PUBLIC;
}

hr_addr_class hr_addr_classify_v6(const uint8_t a[16]) {
    static const uint8_t zero[16] = {0};
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    static const uint8_t nat64[12] = {0, 0x64, 0xff, 0x9b};
    if (!memcmp(a, zero, 15))
        return a[15] == 0 ? HR_ADDR_UNSPECIFIED : a[15] == 1 ? HR_ADDR_LOOPBACK
                                                               : HR_ADDR_RESERVED;
    if (!memcmp(a, mapped, 12) || !memcmp(a, nat64, 12) || !memcmp(a, zero, 12))
        return hr_addr_classify_v4(a + 12); /* v4-mapped, NAT64, v4-compatible */
    if (a[0] == 0x20 && a[1] == 0x02)       /* 6to4: 2002:AABB:CCDD::/48 */
        return hr_addr_classify_v4(a + 2);
    for (size_t i = 0; i < sizeof V6 / sizeof V6[0]; i++)
        if (in_prefix(a, V6[i].net, V6[i].bits))
            return V6[i].cls;
    if ((a[0] & 0xe0) != 0x20) /* outside 2000::/3, the global unicast space */
        return HR_ADDR_RESERVED;
    return HR_ADDR_PUBLIC;
}

hr_addr_class hr_addr_classify(const struct sockaddr *sa) {
    if (sa && sa->sa_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
        uint8_t a[4];
        memcpy(a, &s4->sin_addr, 4);
        return hr_addr_classify_v4(a);
    }
    if (sa && sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
        return hr_addr_classify_v6(s6->sin6_addr.s6_addr);
    }
    return HR_ADDR_RESERVED;
}

const char *hr_addr_class_name(hr_addr_class c) {
    switch (c) {
    case HR_ADDR_PUBLIC: return "public";
    case HR_ADDR_PRIVATE: return "private";
    case HR_ADDR_LOOPBACK: return "loopback";
    case HR_ADDR_LINK_LOCAL: return "link-local";
    case HR_ADDR_MULTICAST: return "multicast";
    case HR_ADDR_UNSPECIFIED: return "unspecified";
    case HR_ADDR_RESERVED: return "reserved";
    }
    return "reserved";
}
