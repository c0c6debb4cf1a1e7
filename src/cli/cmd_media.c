/* hearth media: load one image_url the way the server does (data: URL, or
 * http(s) through the SSRF guard; docs/images.md) and say what it is. */
#include "cli/args.h"
#include "cli/cli.h"
#include "core/error.h"
#include "media/media.h"

#include <stdio.h>

int hr_cmd_media(int argc, char **argv) {
    const char *url = NULL, *allow_hosts = NULL;
    int allow_private = 0;
    double max_mb = HR_MEDIA_DEFAULT_MAX_BYTES / 1048576.0, timeout = HR_MEDIA_DEFAULT_TIMEOUT_S;
    hr_opt opts[] = {
        {"url", HR_OPT_STR, &url, "the image: data:image/...;base64,... or an http(s) URL"},
        {"allow-private-media", HR_OPT_FLAG, &allow_private,
         "fetch from private, loopback and link-local addresses too"},
        {"media-allow-host", HR_OPT_STR, &allow_hosts,
         "comma-separated host names fetched whatever their addresses"},
        {"media-max-mb", HR_OPT_FLOAT, &max_mb, "largest image fetched, in MiB (default 20)"},
        {"media-timeout", HR_OPT_FLOAT, &timeout, "seconds a fetch may take (default 10)"},
    };
    hr_error err = {0};
    int rc = hr_args_parse(argc, argv, opts, sizeof opts / sizeof opts[0],
                           "usage: hearth media --url URL [--allow-private-media] "
                           "[--media-allow-host H,...] [--media-max-mb N] [--media-timeout S]",
                           &err);
    if (rc)
        return rc > 0 ? 0 : hr_cli_fail(&err);
    if (!url) {
        hr_err(&err, HR_EINVAL, "media: --url is required");
        return hr_cli_fail(&err);
    }
    if (!(max_mb > 0 && max_mb <= 1024) || !(timeout > 0 && timeout <= 3600)) {
        hr_err(&err, HR_EINVAL, "media: --media-max-mb must be in (0, 1024], --media-timeout "
               "in (0, 3600]");
        return hr_cli_fail(&err);
    }
    hr_media_opts o = {.max_bytes = (size_t)(max_mb * 1048576.0), .timeout_s = timeout,
                       .allow_private = allow_private, .allow_hosts = allow_hosts};
    hr_image img;
    if (hr_media_load_image(url, &o, &img, &err))
        return hr_cli_fail(&err);
    printf("%s %dx%d ", hr_image_format_name(img.format), img.w, img.h);
    for (int i = 0; i < 16; i++)
        printf("%02x", img.hash[i]);
    printf("\n");
    hr_image_deinit(&img);
    return 0;
}
