"""bkaudit.rpc"""
