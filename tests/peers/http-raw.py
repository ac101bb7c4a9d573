print("RESULT http-raw: 0 passed, 1 failed")
