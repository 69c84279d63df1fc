#include "swap/power.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "swap/procfs.h"

#define SUPPLY_DIR "/sys/class/power_supply"

bool sp_on_battery(void)
{
    DIR *d = opendir(SUPPLY_DIR);
    if (d == NULL)
        return false;
    bool discharging = false, mains_online = false;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[512], type[32], status[32];
        snprintf(path, sizeof path, SUPPLY_DIR "/%s/type", e->d_name);
        if (sp_read_text(path, type, sizeof type) <= 0)
            continue;
        if (strncmp(type, "Mains", 5) == 0) {
            uint64_t online = 0;
            snprintf(path, sizeof path, SUPPLY_DIR "/%s/online", e->d_name);
            if (sp_read_u64(path, &online) && online)
                mains_online = true;
        } else if (strncmp(type, "Battery", 7) == 0) {
            snprintf(path, sizeof path, SUPPLY_DIR "/%s/status", e->d_name);
            if (sp_read_text(path, status, sizeof status) > 0 &&
                strncmp(status, "Discharging", 11) == 0)
                discharging = true;
        }
    }
    closedir(d);
    return discharging && !mains_online;
}

bool sp_laptop_mode(void)
{
    uint64_t v = 0;
    return sp_read_u64("/proc/sys/vm/laptop_mode", &v) && v != 0;
}
