/* src/media/netaddr.c: the SSRF guard's address classes, v4 and v6, with
 * v4 carried inside v6 (mapped, compatible, NAT64, 6to4) unwrapped. */
#include "media/netaddr.h"

#include <arpa/inet.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>
#include <sys/socket.h>

static hr_addr_class cls(const char *text) {
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    if (strchr(text, ':')) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
        s6->sin6_family = AF_INET6;
        assert_int_equal(inet_pton(AF_INET6, text, &s6->sin6_addr), 1);
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
        s4->sin_family = AF_INET;
        assert_int_equal(inet_pton(AF_INET, text, &s4->sin_addr), 1);
    }
    return hr_addr_classify((struct sockaddr *)&ss);
}

typedef struct row {
    const char *addr;
    hr_addr_class c;
} row;

static void check(const row *rows, size_t n) {
    for (size_t i = 0; i < n; i++) {
        hr_addr_class got = cls(rows[i].addr);
        if (got != rows[i].c)
            fail_msg("%s: %s, expected %s", rows[i].addr, hr_addr_class_name(got),
                     hr_addr_class_name(rows[i].c));
    }
}

static void test_v4(void **state) {
    (void)state;
    static const row rows[] = {
        {"8.8.8.8", HR_ADDR_PUBLIC},          {"1.1.1.1", HR_ADDR_PUBLIC},
        {"0.0.0.0", HR_ADDR_UNSPECIFIED},     {"0.1.2.3", HR_ADDR_UNSPECIFIED},
        {"10.0.0.1", HR_ADDR_PRIVATE},        {"10.255.255.255", HR_ADDR_PRIVATE},
        {"11.0.0.0", HR_ADDR_PUBLIC},         {"100.63.255.255", HR_ADDR_PUBLIC},
        {"100.64.0.0", HR_ADDR_PRIVATE},      {"100.127.255.255", HR_ADDR_PRIVATE},
        {"100.128.0.0", HR_ADDR_PUBLIC},      {"127.0.0.1", HR_ADDR_LOOPBACK},
        {"127.255.0.9", HR_ADDR_LOOPBACK},    {"169.254.169.254", HR_ADDR_LINK_LOCAL},
        {"169.255.0.1", HR_ADDR_PUBLIC},      {"172.15.255.255", HR_ADDR_PUBLIC},
        {"172.16.0.0", HR_ADDR_PRIVATE},      {"172.31.255.255", HR_ADDR_PRIVATE},
        {"172.32.0.0", HR_ADDR_PUBLIC},       {"192.168.1.1", HR_ADDR_PRIVATE},
        {"192.169.0.0", HR_ADDR_PUBLIC},      {"192.0.2.5", HR_ADDR_RESERVED},
        {"198.18.0.1", HR_ADDR_RESERVED},     {"198.19.255.255", HR_ADDR_RESERVED},
        {"198.20.0.0", HR_ADDR_PUBLIC},       {"203.0.113.9", HR_ADDR_RESERVED},
        {"224.0.0.1", HR_ADDR_MULTICAST},     {"239.255.255.250", HR_ADDR_MULTICAST},
        {"240.0.0.1", HR_ADDR_RESERVED},      {"255.255.255.255", HR_ADDR_RESERVED},
        {"223.255.255.255", HR_ADDR_PUBLIC},
    };
    check(rows, sizeof rows / sizeof rows[0]);
}

static void test_v6(void **state) {
    (void)state;
    static const row rows[] = {
        {"2606:4700::1111", HR_ADDR_PUBLIC},    {"::", HR_ADDR_UNSPECIFIED},
        {"::1", HR_ADDR_LOOPBACK},              {"fe80::1", HR_ADDR_LINK_LOCAL},
        {"febf::1", HR_ADDR_LINK_LOCAL},        {"fec0::1", HR_ADDR_PRIVATE},
        {"fc00::1", HR_ADDR_PRIVATE},           {"fd12:3456::1", HR_ADDR_PRIVATE},
        {"ff02::1", HR_ADDR_MULTICAST},         {"2001:db8::1", HR_ADDR_RESERVED},
        {"100::1", HR_ADDR_RESERVED},           {"2001::1", HR_ADDR_RESERVED},
        {"4000::1", HR_ADDR_RESERVED},          {"2a00:1450::1", HR_ADDR_PUBLIC},
        /* v4 inside v6: the v4 address decides */
        {"::ffff:127.0.0.1", HR_ADDR_LOOPBACK}, {"::ffff:10.1.2.3", HR_ADDR_PRIVATE},
        {"::ffff:169.254.169.254", HR_ADDR_LINK_LOCAL},
        {"::ffff:8.8.8.8", HR_ADDR_PUBLIC},     {"::127.0.0.1", HR_ADDR_LOOPBACK},
        {"::ffff:0.0.0.0", HR_ADDR_UNSPECIFIED},
        {"64:ff9b::a9fe:a9fe", HR_ADDR_LINK_LOCAL}, {"64:ff9b::808:808", HR_ADDR_PUBLIC},
        {"2002:7f00:1::", HR_ADDR_LOOPBACK},    {"2002:c0a8:101::1", HR_ADDR_PRIVATE},
        {"2002:808:808::1", HR_ADDR_PUBLIC},
    };
    check(rows, sizeof rows / sizeof rows[0]);
}

static void test_names(void **state) {
    (void)state;
    assert_string_equal(hr_addr_class_name(HR_ADDR_LINK_LOCAL), "link-local");
    assert_string_equal(hr_addr_class_name(HR_ADDR_PUBLIC), "public");
    struct sockaddr sa = {.sa_family = AF_UNIX};
    assert_int_equal(hr_addr_classify(&sa), HR_ADDR_RESERVED);
    assert_int_equal(hr_addr_classify(NULL), HR_ADDR_RESERVED);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_v4),
        cmocka_unit_test(test_v6),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
