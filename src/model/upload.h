/* Moving a loaded model's weights to a device backend (model/upload.c). */
#ifndef HR_MODEL_UPLOAD_H
#define HR_MODEL_UPLOAD_H

#include "model/model.h"

/* Upload every weight of m (row layout: not repacked) to be and point the
 * model's views there; m->be becomes be. Not enough device memory is an
 * error naming the bytes needed and free. On error m must be freed. */
int hr_model_upload(hr_model *m, hr_backend *be, hr_error *err);

#endif
